"""What the store benchmarks share: a throwaway server, a role's address of a store, its password, a fake-mode manifest."""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import durable_job as dj
from durable_job_team import store as team_store
from durable_job_team import workers

JOB_TABLES = ("jobs", "job_locks", "calls", "call_events", "drafts", "outcomes", "decisions", "receipts", "links")
THREAD_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def copy_job(admin: str, job_id: str, first: int, count: int) -> None:
    """Copies first..first+count-1 of the job's rows, every text column with the job's and thread's ids substituted."""
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        thread = conn.execute("SELECT thread_id FROM durable_job.jobs WHERE job_id = %s", (job_id,)).fetchone()[0]
        for table in JOB_TABLES + THREAD_TABLES:
            columns = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'durable_job' AND table_name = %s "
                "AND is_identity = 'NO' AND coalesce(column_default, '') NOT LIKE 'nextval%%' ORDER BY ordinal_position",
                (table,),
            ).fetchall()
            names, shown = [], []
            for name, kind in columns:
                names.append(f'"{name}"')
                if kind in ("text", "character varying", "jsonb", "json"):
                    text = f'"{name}"::text'
                    swapped = f"replace(replace({text}, %(thread)s, %(thread)s || '-' || g), %(job)s, %(job)s || '-' || g)"
                    shown.append(f"({swapped})::{kind}" if kind in ("jsonb", "json") else swapped)
                else:
                    shown.append(f'"{name}"')
            key = "thread_id" if table in THREAD_TABLES else "job_id"
            conn.execute(
                f"INSERT INTO durable_job.{table} ({', '.join(names)}) SELECT {', '.join(shown)} FROM durable_job.{table}, "
                f"generate_series(%(first)s::int, %(last)s::int) g WHERE {key} = %(key)s",
                {
                    "thread": thread,
                    "job": job_id,
                    "first": first,
                    "last": first + count - 1,
                    "key": thread if key == "thread_id" else job_id,
                },
            )
        conn.execute("ANALYZE")


ALPHA = "Alpha reports steady revenue in the third quarter.\n"
BETA = "Beta notes that costs rose faster than sales this year.\n"


def throwaway_server(name: str):
    """(a new temporary folder, a PostgreSQL server started in it), its roles' passwords in the folder's pgpass
    unless PGPASSFILE already names one (tests/pg_server.py; the caller stops the server)."""
    from pg_server import PgServer

    folder = tempfile.mkdtemp(prefix=f"durable-job-{name}-bench-")
    os.environ.setdefault("PGPASSFILE", os.path.join(folder, "pgpass"))
    return folder, PgServer.start(os.path.join(folder, "pg"))


def password_of(role: str) -> str:
    with open(os.environ["PGPASSFILE"]) as fh:
        return next(line.rstrip("\n").split(":", 4)[4] for line in fh if line.split(":")[3] == role)


def role_url(url: str, role: str) -> str:
    head, _, rest = url.partition("://")
    return f"{head}://{role}@{rest.split('@', 1)[1]}"


def manifest(folder: str, job_id: str, items: int = 1, **extra) -> str:
    """A fake-mode manifest over alpha.txt (and beta.txt: items=2, the issue's two-item job)."""
    path = os.path.join(folder, f"{job_id}.json")
    texts = (("alpha", ALPHA), ("beta", BETA))[:items]
    for name, text in texts:
        with open(os.path.join(folder, f"{name}.txt"), "w") as fh:
            fh.write(text)
    with open(path, "w") as fh:
        json.dump(
            {
                "schemaVersion": 1,
                "jobId": job_id,
                "approved": True,
                "approvedBy": "alice",
                "mode": "fake",
                "model": "fake-structural-1",
                "providerTransferApproved": False,
                "maxModelCalls": 2,
                "maxAttemptsPerItem": 2,
                "items": [{"id": name, "path": f"{name}.txt", "sha256": dj.sha256_hex(text.encode())} for name, text in texts],
                **extra,
            },
            fh,
        )
    return path


def page_sql(limit: str) -> str:
    """The listing's own statement (STORE_PAGE_SQL) with its parameters written in: every job (limit "NULL") or a page."""
    array = "ARRAY[{}]::text[]".format
    return (
        team_store.STORE_PAGE_SQL.replace("{filters}", "")
        .replace("{p.limit}", limit)
        .replace("{p.ns}", "''")
        .replace("{p.keys}", array(", ".join(f"'{k}'" for k in dj.STATE_KEYS)))
        .replace("{p.channels}", array(", ".join(f"'{c}'" for c in dj.LG_SAVED_CHANNELS)))
    )


def one_finished_five_runnable(folder: str, alice: str) -> None:
    """The store benchmarks' fixture: job `finished` run and decided by alice through the command API, and five submitted
    jobs, runnable-0 to runnable-4."""
    with dj.open_store(store=alice) as s:
        dj.start(s, manifest(folder, "finished"))
    with dj.open_store(store=alice, job="finished") as s:
        dj.decide(s, decision="accept", reviewer="alice", reason="bench")
    for n in range(5):
        with dj.open_store(store=alice) as s:
            workers.submit(s, manifest(folder, f"runnable-{n}"))
