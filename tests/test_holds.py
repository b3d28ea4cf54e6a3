"""A job that needs a person says so (issue 35): a run's refusal is recorded on the job as a hold.

Real SQLite state directories, a real PostgreSQL store with password roles, real `work` processes and the loopback
provider. The issue's repro: a worker with the wrong provider address printed its HOLD line, exited 0, and the job
still said "not started ... resume".
"""

import json
import os
import subprocess
import sys

import test_web
from test_web import live_state, sign_in
from test_work import job_workspace, phases

from conftest import (
    FAKE_KEY,
    PROGRAM,
    RUN_PROGRAM,
    Provider,
    Workspace,
    admin_url,
    as_role,
    clean_env,
    free_port,
    refused,
    run_inprocess,
    sql,
)

serving = test_web.serving  # the fixture that starts serves and stops them after each test


def hold_of(out: dict) -> dict:
    hold = out["hold"]
    assert set(hold) == {"by", "at", "message", "fix"}, hold
    return hold


def test_a_state_directory_run_that_is_refused_says_so_on_the_job_until_its_owner_resumes(ws, tmp_path):
    """Nothing listens at OPENAI_BASE_URL: start is refused; status, jobs --held and the text output carry the hold
    (who, when, the message, the fix); release lifts it; a resume after the fix runs and leaves no hold."""
    port = free_port()
    ws.write_manifest(mode="openai", model="gpt-test", maxAttemptsPerItem=1, maxModelCalls=2)
    ws.env.update({"OPENAI_API_KEY": FAKE_KEY, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "DURABLE_JOB_OPENAI_TIMEOUT": "5"})
    line = ws.start().held("ProviderError", "was not sent")
    status = ws.run("status").ok()
    hold = hold_of(status)
    assert hold["by"] == ws.principal() and hold["at"].endswith("Z")
    assert hold["message"].startswith("ProviderError: ") and hold["message"][len("ProviderError: ") :] in line
    assert f"resume --state-dir {ws.state}" in hold["fix"] and status["next"].startswith(f"held by {ws.principal()} at ")
    text = ws.run("status", "--text").stdout
    assert "  held: ProviderError: " in text and f"(by {ws.principal()} at {hold['at']})" in text
    listed = ws.run("jobs", "--root", str(tmp_path), "--held", state=False).ok()["jobs"]
    assert [j["jobId"] for j in listed] == ["journey"] and listed[0]["hold"] == hold
    assert ws.run("jobs", "--root", str(tmp_path), state=False).ok()["jobs"][0]["hold"] == hold

    released = ws.run("release").ok()
    assert released["released"] == hold and released["hold"] is None and released["phase"] == status["phase"] == "ready"
    assert ws.run("jobs", "--root", str(tmp_path), "--held", state=False).ok()["jobs"] == []
    assert ws.run("release").ok()["released"] is None  # nothing held: said, nothing changed

    ws.run("resume").held("was not sent")  # still nothing there: held again, by the same account
    assert hold_of(ws.run("status").ok())["message"] == hold["message"]
    provider = Provider(tmp_path, port=port)  # the fix: the provider now runs at that address
    try:
        out = ws.run("resume").ok()
        assert out["interrupt"] and ws.run("status").ok()["hold"] is None  # the owner's resume lifted it
    finally:
        provider.stop()


def work(store: str, *flags, env=None) -> subprocess.CompletedProcess:
    """One `work --until-idle` process as the store's worker role, to its end."""
    full = {**clean_env(), **(env or {})}
    argv = [sys.executable, RUN_PROGRAM, PROGRAM, "work", "--store", as_role(store, "worker"), "--until-idle", *flags]
    return subprocess.run(argv, capture_output=True, text=True, env=full, timeout=120)


def work_here(store: str, env: dict):
    """`work --until-idle` as the store's worker role, run in this process: for a look at its result only."""
    return run_inprocess(["work", "--store", as_role(store, "worker"), "--until-idle"], {**clean_env(), **env}, os.getcwd())


def test_a_workers_hold_shows_on_the_job_and_keeps_the_workers_off_it_until_released(tmp_path, store_url, provider, serving):
    """The issue's repro: a job seals its provider, the worker's OPENAI_BASE_URL names another. `work --until-idle` exits 2
    naming the job; status, jobs (--held) carry the worker's hold; the next worker leaves the job alone; a worker cannot
    lift it; the owner's release does, and a worker with the right address runs it to review."""
    w = job_workspace(tmp_path, store_url, 0, provider)
    w.write_manifest(
        sources={"alpha": "Alpha is a test source.\n"}, jobId="job-00", mode="openai", model="gpt-test", baseUrl=provider.base_url
    )
    w.run("submit", "--manifest", w.manifest, "--store", store_url).ok()
    wrong = {**provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"), "OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}

    first = work(store_url, env=wrong)
    assert first.returncode == 2, first.stderr
    assert json.loads(first.stdout)["runs"][0]["held"] is True
    hold_line = first.stderr.strip().splitlines()[-1]
    assert hold_line.startswith("HOLD: JobError: work held 1 job") and "job job-00: JobError: Job job-00 seals its provider" in hold_line
    assert provider.requests() == []  # nothing was sent anywhere

    status = w.run("status", "--job", "job-00").ok()
    hold = hold_of(status)
    assert hold["by"] == "worker" and "seals its provider" in hold["message"] and "release --store" in hold["fix"]
    assert status["phase"] == "not-started" and status["next"].startswith("held by worker at ")
    listed = {j["jobId"]: j for j in w.run("jobs", "--store", store_url, "--json", state=False).ok()["jobs"]}
    assert listed["job-00"]["hold"] == hold
    held = w.run("jobs", "--store", store_url, "--held", "--json", state=False).ok()
    assert [j["jobId"] for j in held["jobs"]] == ["job-00"]

    web = serving(tmp_path, "--store", store_url)  # the page and the API say it too, to whoever may see the job
    alice = sign_in(web, "alice")
    page = alice.get("/jobs/job-00").text
    assert live_state(page) == "Held by worker: needs a person" and 'id="held"' in page and "seals its provider" in page
    assert alice.get("/api/jobs/job-00").json()["hold"] == hold
    assert [j["jobId"] for j in alice.get("/api/jobs?held=1").json()["jobs"]] == ["job-00"]
    assert "Held by worker" in alice.get("/").text
    assert sign_in(web, "carol").get("/api/jobs?held=1").json() == {"jobs": []}

    again = work_here(store_url, provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))  # even with the right address: held until released
    assert again.code == 0 and again.json["runs"] == [] and "claimed" not in again.stderr
    worker_release = subprocess.run(
        [sys.executable, RUN_PROGRAM, PROGRAM, "release", "--store", as_role(store_url, "worker"), "--job", "job-00"],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    assert worker_release.returncode == 2 and "may not release" in worker_release.stderr
    assert hold_of(w.run("status", "--job", "job-00").ok()) == hold

    released = w.run("release", "--job", "job-00").ok()  # alice, its owner
    assert released["released"] == hold and released["hold"] is None
    work_here(store_url, provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5")).ok()
    assert phases(store_url) == {"job-00": "awaiting-review"} and w.run("status", "--job", "job-00").ok()["hold"] is None


def test_holds_in_a_store_are_each_roles_only_as_far_as_it_may_see_and_run_the_job(tmp_path, store_url):
    """Through psycopg as each role: a hold is seen only by who sees its job; written by who runs or tends it, stamped
    with the database's own principal; lifted only by its owner or reviewers; a worker may record one, never lift one."""
    w = Workspace(tmp_path, store=store_url)
    w.write_manifest(jobId="held-job", reviewers=["bob"])
    w.run("submit", "--manifest", w.manifest).ok()
    insert = (
        "INSERT INTO durable_job.holds (job_id, kind, principal, at_utc, message, fix, program) "
        "VALUES ('held-job', 'hold', 'someone-else', '2026-12-02T00:00:00Z', 'm', 'f', 'p')"
    )
    assert "row-level security" in refused(as_role(store_url, "carol"), insert)  # carol neither runs nor tends it
    assert "permission denied" in refused(as_role(store_url, "mallory"), insert)  # never granted
    sql(as_role(store_url, "worker"), insert)
    assert sql(admin_url(store_url), "SELECT principal FROM durable_job.holds") == [("worker",)]  # stamped by the database
    assert sql(as_role(store_url, "carol"), "SELECT count(*) FROM durable_job.holds") == [(0,)]  # not her job: not her hold
    assert sql(as_role(store_url, "bob"), "SELECT count(*) FROM durable_job.holds") == [(1,)]  # its reviewer sees it
    sql(as_role(store_url, "worker"), "UPDATE durable_job.holds SET message = 'again', principal = 'alice'")
    assert sql(admin_url(store_url), "SELECT principal, message FROM durable_job.holds") == [("worker", "again")]
    assert sql(as_role(store_url, "worker"), "DELETE FROM durable_job.holds RETURNING job_id") == []  # a worker lifts nothing
    assert sql(as_role(store_url, "carol"), "DELETE FROM durable_job.holds RETURNING job_id") == []
    assert "permission denied" in refused(as_role(store_url, "mallory"), "SELECT * FROM durable_job.holds")
    smuggled = "SET ROLE worker; " + insert.replace("held-job", "other")
    assert refused(as_role(store_url, "carol"), smuggled)  # SET ROLE to a worker is no worker: session_user decides
    assert sql(as_role(store_url, "bob"), "DELETE FROM durable_job.holds RETURNING job_id") == [("held-job",)]  # its reviewer lifts it
