"""Keys and scale (issue 43): a rotated-out key encrypts no new job, a key file others may read is refused, and the
commands that walk a store's jobs keep a bounded number of connections however many jobs it holds.

Real PostgreSQL roles with passwords, real `submit`, `start`, `rotate-key` and `work` processes; for the scale
journey a server of its own started with max_connections = 30, holding 300 finished jobs.
"""

import json
import os
import subprocess
import sys

import pytest
from test_encrypted import encrypted_store
from test_holds import work

from conftest import BOILER, PROGRAM, RUN_PROGRAM, Workspace, admin_url, clean_env, new_key_file, sql


def test_a_rotated_out_key_encrypts_no_new_job_and_a_job_left_under_it_is_held_with_the_true_fix(pg_server, tmp_path):
    """The issue's repro: after `rotate-key --new-key-file kek-2`, alice's submit with the old key file encrypted a job
    under the key the runbook then destroys. Now submit and start are refused naming the fix, before anything is written;
    a job still left under the old key (a row restored from a backup) is held by the worker that holds the current
    key, with a message saying which key it is under and how its administrator rewraps it; `work` exits 2."""
    url, old = encrypted_store(pg_server, tmp_path)
    alice = Workspace(tmp_path / "alice", store=url)
    alice.env["DURABLE_JOB_KEY_FILE"] = old
    alice.write_manifest(sources={"alpha": BOILER}, jobId="left")
    alice.run("submit", "--manifest", alice.manifest).ok()
    admin = admin_url(url)
    before = sql(admin, "SELECT kek_id, wrapped FROM durable_job.data_keys WHERE job_id = 'left'")[0]

    new = new_key_file(tmp_path, "kek-2")
    rotator = Workspace(tmp_path / "admin", store=admin)
    rotated = rotator.run("rotate-key", "--store", admin, "--new-key-file", new, env={"DURABLE_JOB_KEY_FILE": old}).ok()
    assert rotated["jobs"]["rewrapped"] == 1
    ((at,),) = sql(admin, "SELECT retired_utc FROM durable_job.retired_keys")

    late = Workspace(tmp_path / "late", store=url)
    late.env["DURABLE_JOB_KEY_FILE"] = old
    late.write_manifest(sources={"alpha": BOILER}, jobId="late")
    for command in (["submit", "--manifest", late.manifest], ["start", "--manifest", late.manifest]):
        line = late.run(*command).held("EncryptedError", "this key was rotated out at " + at, "use the current key file", rotated["kekId"])
        assert before[0] in line and "nothing of job late was written" in line
    assert sql(admin, "SELECT count(*) FROM durable_job.jobs WHERE job_id = 'late'") == [(0,)]
    stranger = new_key_file(tmp_path, "someone-elses")  # a key never the store's: not its current one either
    late.run("submit", "--manifest", late.manifest, env={"DURABLE_JOB_KEY_FILE": stranger}).held(
        "EncryptedError", "not the store", "current key " + rotated["kekId"]
    )
    late.run("submit", "--manifest", late.manifest, env={"DURABLE_JOB_KEY_FILE": new}).ok()  # the current key encrypts it

    # a job left under the old key (its data key as a backup from before the rotation holds it)
    sql(admin, "UPDATE durable_job.data_keys SET kek_id = %s, wrapped = %s WHERE job_id = 'left'", before)
    first = work(url, env={"DURABLE_JOB_KEY_FILE": new})
    assert first.returncode == 2, first.stderr
    runs = {r["jobId"]: r for r in json.loads(first.stdout)["runs"]}
    assert runs["late"]["to"] == "awaiting-review" and runs["left"]["held"] is True
    message = runs["left"]["hold"]
    assert f"left under {before[0]}, rotated out at {at}" in message and f"the current key is {rotated['kekId']}" in message
    assert "if the key was rotated (rotate-key), DURABLE_JOB_KEY_FILE must name the new key file" not in message  # it does
    assert "HOLD: JobError: work held 1 job" in first.stderr
    held = subprocess.run(
        [sys.executable, RUN_PROGRAM, PROGRAM, "jobs", "--store", url, "--held", "--json"], capture_output=True, text=True, env=clean_env()
    )
    listed = json.loads(held.stdout)["jobs"]
    assert [j["jobId"] for j in listed] == ["left"] and "rotated out at" in listed[0]["hold"]["message"]
    assert work(url, env={"DURABLE_JOB_KEY_FILE": new}).returncode == 0  # held: the next worker leaves it alone

    # the fix the message names: the administrator rewraps it with the old key file; its owner releases it
    fixed = rotator.run("rotate-key", "--store", admin, "--new-key-file", new, env={"DURABLE_JOB_KEY_FILE": old}).ok()
    assert fixed["jobs"] == {"rewrapped": 1, "shredded": 0, "already": 1}
    alice.run("release", "--job", "left", env={"DURABLE_JOB_KEY_FILE": new}).ok()  # after the rotation, with the current key
    done = work(url, env={"DURABLE_JOB_KEY_FILE": new})
    assert done.returncode == 0, done.stderr
    assert [r["to"] for r in json.loads(done.stdout)["runs"]] == ["awaiting-review"]


def test_a_worker_with_the_rotated_out_key_is_told_to_use_the_current_one_and_exits_2(pg_server, tmp_path):
    url, old = encrypted_store(pg_server, tmp_path)
    alice = Workspace(tmp_path / "alice", store=url)
    alice.env["DURABLE_JOB_KEY_FILE"] = old
    alice.write_manifest(sources={"alpha": BOILER}, jobId="rotated")
    alice.run("submit", "--manifest", alice.manifest).ok()
    new = new_key_file(tmp_path, "kek-2")
    admin = admin_url(url)
    Workspace(tmp_path / "admin", store=admin).run(
        "rotate-key", "--store", admin, "--new-key-file", new, env={"DURABLE_JOB_KEY_FILE": old}
    ).ok()
    stale = work(url, env={"DURABLE_JOB_KEY_FILE": old})
    assert stale.returncode == 2, stale.stderr  # a refusal is never a clean exit
    (run,) = json.loads(stale.stdout)["runs"]
    assert "this key was rotated out at" in run["hold"] and "use the current key file" in run["hold"]


@pytest.mark.parametrize("mode,refused", [(0o644, True), (0o640, True), (0o666, True), (0o600, False), (0o400, False)])
def test_a_key_file_others_may_read_is_refused_with_the_chmod_that_fixes_it(tmp_path, mode, refused):
    ws = Workspace(tmp_path / "job")
    key = new_key_file(tmp_path)
    os.chmod(key, mode)
    ws.write_manifest(sources={"alpha": BOILER})
    if not refused:
        assert ws.start(env={"DURABLE_JOB_KEY_FILE": key}).ok()["interrupt"]
        return
    ws.start(env={"DURABLE_JOB_KEY_FILE": key}).held(
        "EncryptedError", f"key file {key} (DURABLE_JOB_KEY_FILE) is readable by others (mode {mode:04o}); run: chmod 600 {key}"
    )
    assert not ws.has_job()  # refused before anything was written
    ws.run("start", "--manifest", ws.manifest, "--key-file", key).held(
        f"key file {key} (--key-file) is readable by others"
    )  # the flag given is named
    ws.run("rotate-key", "--new-key-file", key, env={"DURABLE_JOB_KEY_FILE": new_key_file(tmp_path, "ok")}).held(
        f"key file {key} (--new-key-file) is readable by others", f"chmod 600 {key}"
    )


# -- commands that walk many jobs ---------------------------------------------------------------------------------------

FINISHED = 300


@pytest.fixture(scope="module")
def crowded(tmp_path_factory, pg_server):
    """A server of its own with max_connections = 30 (27 for roles that are not superusers) and a store of 300 finished
    jobs: one run and decided through the program, its rows copied with its ids substituted (tests/job_copies.py,
    as bench/lasting.py grows its store); (the server, alice's URL, the administrator's). After the session's server
    (pg_server), whose roles' passwords password_of finds first in the pgpass file (this one's roles have others)."""
    from job_copies import copy_job
    from pg_server import PgServer

    import durable_job as dj
    from durable_job_team import store as team_store

    folder = tmp_path_factory.mktemp("crowded")
    server = PgServer.start(str(folder / "pg"), max_connections=30)
    try:
        store = server.new_database("crowded")
        team_store.migrate_schema(store, grant=("alice",), grant_worker=("worker",))
        alice, admin = server.role_url(store, "alice"), server.role_url(store, "durable")
        with dj.open_store(store=alice) as s:
            dj.start(s, Workspace(folder / "job").write_manifest(jobId="finished"))
        with dj.open_store(store=alice, job="finished") as s:
            dj.decide(s, decision="accept", reviewer="alice", reason="done")
        copy_job(admin, "finished", 1, FINISHED - 1)
        yield server, alice, admin
    finally:
        server.stop()


def most_connections(server, argv: list, env=None) -> tuple[subprocess.CompletedProcess, int]:
    """Run a command to its end; the most connections it held at once, as the server's pg_stat_activity saw them
    (sampled every few milliseconds by the superuser, on a connection of its own)."""
    import threading

    import psycopg

    seen, done = [0], threading.Event()

    def sample():
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            while not done.is_set():
                (n,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE usename <> 'postgres' AND backend_type = 'client backend'"
                ).fetchone()
                seen[0] = max(seen[0], n)
                done.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        proc = subprocess.run(
            [sys.executable, RUN_PROGRAM, PROGRAM, *argv], capture_output=True, text=True, env={**clean_env(), **(env or {})}, timeout=300
        )
    finally:
        done.set()
        sampler.join()
    return proc, seen[0]


def test_commands_that_walk_300_jobs_keep_a_few_connections_on_a_server_of_30(crowded, tmp_path):
    """The issue's repro: `prune --older-than 0` over 300 finished jobs failed on `too many clients already` (a store
    opened for every job, its connections kept). Each command that walks the jobs keeps a few, however many jobs."""
    server, alice, admin = crowded
    key = new_key_file(tmp_path)
    walks = [
        (["jobs", "--store", alice, "--json"], lambda out: len(out["jobs"]) == FINISHED),
        (["usage", "--store", alice, "--json"], lambda out: out["total"]["jobs"] == FINISHED),
        (["prune", "--store", admin, "--older-than", "0", "--dry-run", "--json"], lambda out: len(out["jobs"]) == FINISHED),
        (["prune", "--store", admin, "--older-than", "0", "--shred", "--json"], lambda out: len(out["jobs"]) == FINISHED),
        (["prune", "--store", admin, "--older-than", "0", "--json"], lambda out: out["jobs"] == []),
        (
            ["rotate-key", "--store", admin, "--new-key-file", new_key_file(tmp_path, "kek-2"), "--key-file", key, "--json"],
            lambda out: True,
        ),
        (["jobs", "--store", alice, "--json"], lambda out: {j["phase"] for j in out["jobs"]} == {"decided"}),
    ]
    for argv, check in walks:
        proc, most = most_connections(server, argv)
        assert proc.returncode == 0, (argv[0], proc.stderr[-800:])
        assert check(json.loads(proc.stdout)), argv
        assert most <= 4, (argv, most)
