"""durable_job_team: the team's extensions to durable_job, kept beside durable_job.py (the one-file core).

Each is imported only by the commands that use it, never at the core's top, so a state-directory job runs with
durable_job.py alone:

- store: the PostgreSQL store (PgStore, the core's Store interface for a --store job), its migrations as SQL files in
  migrations/, and its own commands (migrate, a listing's page, usage, delete);
- workers: `submit` and `work`, the store's queue;
- web: `durable-job serve`, the live review web app (its Python here; templates/ and static/ beside it).

What a job seals is exactly the code that runs it: durable_job.py's sha256, and for a store job each of store.py,
workers.py and the migrations (durable_job.new_job's codeFiles). The web app acts only through the core's command
API and is sealed into no job, so changing it strands none in flight.
"""
