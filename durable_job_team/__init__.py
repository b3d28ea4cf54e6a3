"""durable_job_team: the team's extensions to durable_job, kept beside durable_job.py (the one-file core).

The core never names what is here: when a command line needs the package (a team command, a --store, --version),
durable_job.load_team() imports it and calls team(), which registers the package with the core by building its
durable_job.Team whole: the store's opener and engine, and the team's commands. Each module is imported only by the
commands that use it, never at the core's top, so a state-directory job runs with durable_job.py alone:

- cli: the team's commands (serve, work, submit, migrate, notify, passkeys, rotate-key, shred, prune, usage, limits,
  jobs, delete), their text renderers and their rows, in the core's form;
- store: the PostgreSQL store (PgStore, the core's Store interface for a --store job), its migrations as SQL files in
  migrations/, and its own administration (migrate, a listing's page, usage, delete);
- workers: `submit` and `work`, the store's queue;
- web: `durable-job serve`, the live review web app (its Python here; templates/ and static/ beside it);
- notify: the outbox's sender.

What a job seals is the engine, the code that decides what it sends and accepts: durable_job.py through its line
"# ---- the engine ends here", and for a store job store.py through its own such line and the migrations, in name
order (durable_job.new_job's engineSha256 and engineParts). cli.py, workers.py, the rest of store.py and the web app
act only through the core's command API and are sealed into no job, so changing them strands none in flight.
"""


def open_store(url: str, job: str, **options):
    """A --store's job: durable_job_team.store.PgStore (psycopg is imported only now)."""
    from durable_job_team.store import PgStore

    return PgStore(url, job, **options)


def address_secrets(url: str) -> frozenset:
    """The password a store address holds, kept out of every output (durable_job_team.store's reading of it)."""
    from durable_job_team.store import address_secrets as of_address

    return of_address(url)


def set_up_refusal(store, exc):
    """The refusal of a store command on a store not yet set up, naming the step the role may take."""
    from durable_job_team.store import set_up_refusal as refusal

    return refusal(store, exc)


def store_engine() -> tuple:
    """The files beside durable_job.py a store job's engine covers (durable_job_team.store.STORE_ENGINE_PARTS)."""
    from durable_job_team.store import STORE_ENGINE_PARTS

    return tuple(STORE_ENGINE_PARTS)


def team():
    """This package as the core takes it: a durable_job.Team built whole, which the core's CLI and open_store use.

    The plainest honest shape: one function the core calls when it needs the package, returning one object; no
    registry kept at module level, so what the core runs is decided by what it was handed, never by an import's side
    effect."""
    import durable_job
    from durable_job_team import cli

    return durable_job.Team(
        open_store=open_store,
        store_engine=store_engine,
        address_secrets=address_secrets,
        set_up_refusal=set_up_refusal,
        commands=cli.COMMANDS,
    )
