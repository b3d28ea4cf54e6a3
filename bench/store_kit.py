"""What the store benchmarks share: a throwaway server, a role's address of a store, its password, a fake-mode manifest."""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import durable_job as dj
from durable_job_team import store as team_store
from durable_job_team import workers

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
