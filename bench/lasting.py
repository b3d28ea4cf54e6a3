"""`make bench`, a store that lasts: what one job's commands and a worker's claim cost as the store grows.

A throwaway PostgreSQL (tests/pg_server.py) holds one store. It grows to 100, 1,000 and 10,000 finished
(decided) jobs beside 5 runnable ones, and at each size this prints, same run: `status` of one job, `submit`
of one new manifest, one claim poll (RUNNABLE_SQL, as the worker role), a 50-job page (`jobs --limit 50`),
the full listing (`jobs`, piped JSON) against psql's raw read of the same jobs as JSON, and the store's bytes
per job, then prune's figure. Targets (issue 24): status, inspect, start, submit, the claim and a page within
1.5x of their cost at 100 jobs; the full listing within 3x of the raw read; a pruned job's bytes within 25%.

The fixture (documented, not hand-written rows): one job is run and decided through the program's own write
path; the store then copies that job's rows, table by table and column by column as the program wrote them,
N times, each copy's jobId and threadId substituted in every text column (its job record, journal and chain
name it). A copy is a listed, finished job exactly like the original; its chain names it, so `verify` of a
copy is not what this measures.
"""

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROGRAM = os.path.join(REPO, "durable_job.py")
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, REPO)

import psycopg  # noqa: E402
from job_copies import copy_job  # noqa: E402
from store_kit import manifest, one_finished_five_runnable, page_sql, role_url, throwaway_server  # noqa: E402

import durable_job as dj  # noqa: E402
from durable_job_team import store as team_store  # noqa: E402
from durable_job_team import workers  # noqa: E402

SIZES = tuple(int(n) for n in os.environ.get("BENCH_SIZES", "100,1000,10000").split(","))


def wall(argv, env, runs=3) -> float:
    """Median wall seconds of a whole command (interpreter start-up included)."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, env=env)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def claim_poll(url: str, runs=20) -> float:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(workers.RUNNABLE_SQL).fetchall()
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            conn.execute(workers.RUNNABLE_SQL).fetchall()
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def raw_read(admin_alice: str, env) -> float:
    query = (
        "SELECT json_agg(json_build_object('jobId', j.job_id, 'owner', j.owner, 'reviewers', j.reviewers, 'createdAtUtc', j.created_utc, "
        "'job', j.record_json::json, 'final', r.receipt_json::json) ORDER BY j.created_utc, j.job_id) "
        "FROM durable_job.jobs j LEFT JOIN durable_job.receipts r USING (job_id)"
    )
    return wall(["psql", "-XAt", admin_alice, "-c", query], env)


def raw_statement(alice: str, env) -> float:
    """psql running the listing's own statement (STORE_PAGE_SQL, every job) with its rows as JSON: the raw cost of
    reading every column `jobs` reads, before any of the program's own work."""
    sql = page_sql("NULL")
    return wall(["psql", "-XAt", alice, "-c", f"SELECT json_agg(t) FROM ({sql}) t"], env)


def store_bytes(admin: str) -> int:
    with psycopg.connect(admin, autocommit=True) as conn:
        return conn.execute(
            "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'durable_job' AND c.relkind = 'r'"
        ).fetchone()[0]


def prune_figures(server, folder: str, env: dict, count: int = 100) -> tuple:
    """A store of `count` finished jobs, each run and decided through the program, pruned by its administrator:
    its bytes per job after (VACUUM FULL: the space given back, as an administrator's maintenance does) / before."""
    store = server.new_database("pruned")
    team_store.migrate_schema(store, grant=("alice",))
    alice, admin = role_url(store, "alice"), role_url(store, "durable")
    for n in range(count):
        with dj.open_store(store=alice) as s:
            dj.start(s, manifest(folder, f"kept-{n}", items=2))
        with dj.open_store(store=alice, job=f"kept-{n}") as s:
            dj.decide(s, decision="accept", reviewer="alice", reason="bench")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("VACUUM FULL")
    before = store_bytes(admin)
    began = time.perf_counter()
    subprocess.run([sys.executable, PROGRAM, "prune", "--store", admin, "--older-than", "0"], capture_output=True, check=True, env=env)
    took = (time.perf_counter() - began) / count
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("VACUUM FULL")
    return store_bytes(admin) / before, took


def main() -> int:
    folder, server = throwaway_server("lasting")
    try:
        store = server.new_database("lasting")
        team_store.migrate_schema(store, grant=("alice", "bob"), grant_worker=("worker",))
        alice, admin = role_url(store, "alice"), role_url(store, "durable")
        one_finished_five_runnable(folder, alice)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DURABLE_JOB_"))}
        py = [sys.executable, PROGRAM]
        rows, made, before = [], 1, None
        for size in SIZES:
            copy_job(admin, "finished", made, size - made)
            made = size
            figures = {
                "status": wall([*py, "status", "--store", alice, "--job", "finished"], env),
                "inspect": wall([*py, "inspect", "--store", alice, "--job", "finished"], env),
                "start": wall([*py, "start", "--store", alice, "--manifest", manifest(folder, f"started-{size}")], env, runs=1),
                "submit": wall([*py, "submit", "--store", alice, "--manifest", manifest(folder, f"new-{size}")], env, runs=1),
                "claim": claim_poll(role_url(store, "worker")),
                "page": wall([*py, "jobs", "--store", alice, "--limit", "50"], env),
                "listing": wall([*py, "jobs", "--store", alice], env, runs=1 if size > 1000 else 3),
                "raw": raw_read(alice, env),
                "statement": raw_statement(alice, env),
                "bytes": store_bytes(admin) / (size + 5),
            }
            before = before or figures
            rows.append((size, figures))
            print(f"  grown to {size} finished jobs", file=sys.stderr, flush=True)
        print("a store that lasts (one store; N finished jobs and 5 runnable; medians, same run):")
        print(
            f"{'N':>7} {'status':>9} {'inspect':>9} {'start':>9} {'submit':>9} {'claim':>9} {'50-page':>9} {'listing':>9} "
            f"{'raw read':>9} {'list/raw':>8} {'KB/job':>7}"
        )
        for size, f in rows:
            print(
                f"{size:>7} {f['status'] * 1000:>7.0f}ms {f['inspect'] * 1000:>7.0f}ms {f['start'] * 1000:>7.0f}ms "
                f"{f['submit'] * 1000:>7.0f}ms {f['claim'] * 1000:>7.2f}ms "
                f"{f['page'] * 1000:>7.0f}ms {f['listing'] * 1000:>7.0f}ms {f['raw'] * 1000:>7.0f}ms {f['listing'] / f['raw']:>7.1f}x "
                f"{f['bytes'] / 1024:>7.1f}"
            )
        last = rows[-1][1]
        met = True
        for name, limit in (("status", 1.5), ("inspect", 1.5), ("start", 1.5), ("submit", 1.5), ("claim", 1.5), ("page", 1.5)):
            ratio = last[name] / before[name]
            met &= ratio <= limit
            print(f"  {name} at {SIZES[-1]} / at {SIZES[0]}: {ratio:.2f}x (target <= {limit}x)")
        ratio = last["listing"] / last["raw"]
        met &= ratio <= 3
        print(f"  full listing / raw psql read at {SIZES[-1]}: {ratio:.1f}x (target <= 3x)")
        print(
            f"  full listing / psql running the listing's own statement at {SIZES[-1]}: {last['listing'] / last['statement']:.1f}x "
            f"({last['statement'] * 1000:.0f} ms: reading every column the listing reads)"
        )
        kept, took = prune_figures(server, folder, env)
        met &= kept <= 0.25
        print(f"  prune: store bytes per finished job after / before {kept:.0%} (target <= 25%); {took * 1000:.0f} ms a job")
        return 0 if met or "--strict" not in sys.argv else 1  # as bench.py: a missed target fails only --strict
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
