"""durable_job_team: the team's extensions to durable_job, kept beside durable_job.py and outside its seal.

Every job seals the sha256 of durable_job.py, the one-file core: what a job does, its journal and its records.
What a team adds around the core lives here, so changing it strands no job in flight:

- web: `durable-job serve`, the live review web app (its Python here; templates/ and static/ beside it);
- later, the PostgreSQL store and the workers.

An extension acts only through the core's command API (`import durable_job`, then `durable_job.decide(...)` and
the Store interface); durable_job.py imports an extension only inside the command that uses it, never at its top.
"""
