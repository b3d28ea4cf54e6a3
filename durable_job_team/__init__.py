"""durable_job_team: the team's extensions to durable_job, kept beside durable_job.py (the one-file core).

Each is imported only by the commands that use it, never at the core's top, so a state-directory job runs with
durable_job.py alone:

- store: the PostgreSQL store (PgStore, the core's Store interface for a --store job), its migrations as SQL files in
  migrations/, and its own commands (migrate, a listing's page, usage, delete);
- workers: `submit` and `work`, the store's queue;
- web: `durable-job serve`, the live review web app (its Python here; templates/ and static/ beside it).

What a job seals is the engine, the code that decides what it sends and accepts: durable_job.py through its line
"# ---- the engine ends here", and for a store job store.py through its own such line and the migrations, in name
order (durable_job.new_job's engineSha256 and engineParts). workers.py, the rest of store.py and the web app act
only through the core's command API and are sealed into no job, so changing them strands none in flight.
"""
