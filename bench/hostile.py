"""`make bench`, hostile roles (issue 30): what the store's fixed search_path costs its reads, same run.

m011_hostile_roles redefines the functions every row-level policy calls (is_admin, is_kind, runs, tends,
decides, job_of) with `SET search_path = pg_catalog, pg_temp`: a function with a SET clause is never
inlined and sets the path on every call. Reads are where that could show. One store (tests/pg_server.py)
holds 1,000 finished jobs (bench/lasting.py's fixture: one job run and decided through the program, its
rows copied) and 5 runnable ones; in alternated rounds, the administrator puts the functions back as m004
made them ("before") or as m011 makes them ("after"), and each round times, in this process:

* the full listing's statement (STORE_PAGE_SQL over every job, as alice, who owns them all),
* a 50-job page of it,
* a worker's claim poll (RUNNABLE_SQL, as the worker role),
* `status` of one job through the command API (open_store + status, as alice).

It prints each figure's median before and after and their ratio; the target (issue 30) is <= 1.05x.
Exit 1 with --strict when a ratio misses it.
"""

import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.path.insert(0, HERE)

import psycopg  # noqa: E402
from lasting import copy_job  # noqa: E402
from store_kit import one_finished_five_runnable, page_sql, role_url, throwaway_server  # noqa: E402

import durable_job as dj  # noqa: E402
from durable_job_team import store as team_store  # noqa: E402
from durable_job_team import workers  # noqa: E402

POLICY_HELPERS = ("is_admin()", "is_kind(", "runs(", "tends(", "decides(", "job_of(")
ROUNDS, REPEATS, JOBS, TARGET = 9, 5, 1000, 1.05


def definitions(statements, replace: bool) -> list:
    """The policy helpers' CREATE statements among `statements` (m004's are CREATE FUNCTION: made replacing)."""
    functions = [s for s in statements if s.startswith(("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))]
    chosen = [s for s in functions if any(f"durable_job.{name}" in s.split(" RETURNS ")[0] for name in POLICY_HELPERS)]
    return [s.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION") if replace else s for s in chosen]


def timed(fn) -> float:
    fn()  # warm: plans and caches as a long-running reader has them
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def figures(alice: str, worker: str) -> dict:
    with psycopg.connect(alice, autocommit=True) as a, psycopg.connect(worker, autocommit=True) as w:
        out = {
            "listing (1,005 jobs)": timed(lambda: a.execute(page_sql("NULL")).fetchall()),
            "50-job page": timed(lambda: a.execute(page_sql("50")).fetchall()),
            "claim poll": timed(lambda: w.execute(workers.RUNNABLE_SQL).fetchall()),
        }

    def status():
        with dj.open_store(store=alice, job="finished") as s:
            dj.status(s)

    out["status (command API)"] = timed(status)
    return out


def main() -> int:
    folder, server = throwaway_server("hostile")
    try:
        store = server.new_database("hostile")
        team_store.migrate_schema(store, grant=("alice",), grant_worker=("worker",))
        alice, admin, worker = role_url(store, "alice"), role_url(store, "durable"), role_url(store, "worker")
        one_finished_five_runnable(folder, alice)
        copy_job(admin, "finished", 1, JOBS - 1)
        (_, m004), (_, m011) = team_store.store_migrations(("m004_policies", "m011_hostile_roles"))
        before, after = definitions(m004, True), definitions(m011, False)
        assert len(before) == len(after) == len(POLICY_HELPERS), (len(before), len(after))
        seen: dict = {"before": [], "after": []}
        for _ in range(ROUNDS):
            for name, statements in (("before", before), ("after", after)):
                with psycopg.connect(admin, autocommit=True) as conn:
                    for statement in statements:
                        conn.execute(statement)
                seen[name].append(figures(alice, worker))
    finally:
        server.stop()
    print(
        f"hostile roles: the policy helpers as m004 made them (before) and with m011's fixed search_path (after), {ROUNDS} alternated rounds:"
    )
    print(f"{'figure':<24} {'before':>10} {'after':>10} {'ratio':>7}  target")
    met = True
    for figure in seen["before"][0]:
        b = statistics.median(r[figure] for r in seen["before"])
        a = statistics.median(r[figure] for r in seen["after"])
        ok = a / b <= TARGET
        met &= ok
        print(f"{figure:<24} {b * 1000:>8.2f}ms {a * 1000:>8.2f}ms {a / b:>6.2f}x  <= {TARGET}x {'PASS' if ok else 'MISS'}")
    return 0 if met or "--strict" not in sys.argv else 1


if __name__ == "__main__":
    sys.exit(main())
