"""Limits a team sets once (issue 48): requests (and tokens) per minute for an endpoint and a model, set by the store's
administrator, kept in the store; every worker and every run takes its call's slot in the database (take_slot) before it
journals the call pending, and otherwise waits holding nothing: no pending row, no job lock, no connection. A state
directory takes its limit from the environment. Real PostgreSQL, real `work` processes, the loopback provider (openai
mode) with a sliding-minute limit of its own as witness.
"""

import json
import os
import subprocess
import sys
import time

import psycopg
import pytest

from conftest import PROGRAM, Workspace, admin_url, as_role, clean_env, kill_group, openai_workspace, refused, sql, wait_for

ENDPOINT = "http://127.0.0.1:9/v1"


def limits(ws: Workspace, url: str, *flags) -> "object":
    return ws.run("limits", "--store", url, *flags)


def test_the_administrator_sets_a_limit_once_everyone_reads_it_and_nobody_else_may_set_one(tmp_path, store_url):
    ws = Workspace(tmp_path, store=store_url)
    admin = admin_url(store_url)
    assert limits(ws, store_url).ok()["limits"] == []
    set_ = limits(ws, admin, "--endpoint", ENDPOINT, "--model", "gpt-test", "--requests-per-minute", "30", "--tokens-per-minute", "90000")
    [limit] = set_.ok()["limits"]
    assert (limit["endpoint"], limit["model"], limit["requestsPerMinute"], limit["tokensPerMinute"], limit["setBy"]) == (
        ENDPOINT,
        "gpt-test",
        30,
        90000,
        "durable",
    )
    # alice (a person) and the worker read it; neither may set or clear one
    assert limits(ws, store_url).ok()["limits"] == [limit]
    assert limits(ws, as_role(store_url, "worker")).ok()["limits"] == [limit]
    text = ws.run("limits", "--store", store_url, "--text")
    assert text.code == 0 and "gpt-test at http://127.0.0.1:9/v1: 30 requests, 90000 tokens a minute (set by durable" in text.stdout
    line = limits(ws, store_url, "--endpoint", ENDPOINT, "--model", "gpt-test", "--requests-per-minute", "3000").held(
        "the store's administrator's", "role alice may not"
    )
    assert "ask the administrator" in line
    limits(ws, store_url, "--endpoint", ENDPOINT, "--model", "gpt-test", "--clear").held("the store's administrator's")
    # the administrator changes it (a new number, tokens dropped), then clears it
    changed = limits(ws, admin, "--endpoint", ENDPOINT + "/", "--model", "gpt-test", "--requests-per-minute", "60").ok()
    assert [(r["requestsPerMinute"], r["tokensPerMinute"]) for r in changed["limits"]] == [(60, None)]
    assert limits(ws, admin, "--endpoint", ENDPOINT, "--model", "gpt-test", "--clear").ok()["limits"] == []


@pytest.mark.parametrize(
    "flags, phrase",
    [
        (["--requests-per-minute", "30"], "give --endpoint URL and --model M"),
        (["--endpoint", "ftp://x/v1", "--model", "m", "--requests-per-minute", "30"], "is not an http(s) URL"),
        (["--endpoint", ENDPOINT, "--model", "m", "--requests-per-minute", "0"], "give a positive whole number"),
        (["--endpoint", ENDPOINT, "--model", "m", "--tokens-per-minute", "500"], "goes with --requests-per-minute N"),
        (["--endpoint", ENDPOINT, "--model", "m", "--requests-per-minute", "5", "--clear"], "--clear removes the limit"),
        (["--endpoint", ENDPOINT, "--model", "m", "--requests-per-minute", "many"], "--requests-per-minute"),
    ],
    ids=["no-pair", "not-a-url", "zero", "tokens-alone", "clear-and-set", "not-a-number"],
)
def test_a_bad_limit_is_one_hold_line_naming_the_fix(tmp_path, store_url, flags, phrase):
    ws = Workspace(tmp_path, store=store_url)
    limits(ws, admin_url(store_url), *flags).held(phrase)
    assert sql(admin_url(store_url), "SELECT count(*) FROM durable_job.limits") == [(0,)]


def test_without_a_store_limits_says_where_a_state_directory_takes_its_limit_from():
    from conftest import assert_held

    out = subprocess.run([sys.executable, PROGRAM, "limits"], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert_held(out.returncode, out.stdout, out.stderr, "give --store URL", "DURABLE_JOB_REQUESTS_PER_MINUTE")


def set_limit(store_url: str, rpm: int, endpoint: str = ENDPOINT, tpm=None) -> None:
    sql(
        admin_url(store_url),
        "INSERT INTO durable_job.limits (endpoint, model, requests_per_minute, tokens_per_minute, set_utc) VALUES (%s, %s, %s, %s, 'now')",
        (endpoint, "gpt-test", rpm, tpm),
    )


def test_only_take_slot_writes_the_ledger_whatever_a_runner_tries(store_url, tmp_path):
    """The ledger decides who may call: a row a runner could insert would let it starve every other job (or, deleted,
    let it exceed the limit). The worker and alice try a direct insert, an update, a delete, SET ROLE to the owner, and a
    function of their own in pg_temp that shadows a name take_slot uses; the ledger holds only what take_slot wrote."""
    ws = Workspace(tmp_path, store=store_url)
    ws.write_manifest(jobId="job-a")
    ws.run("submit", "--manifest", ws.manifest, "--store", store_url).ok()
    set_limit(store_url, 2)
    worker = as_role(store_url, "worker")
    for role_url in (store_url, worker):
        for statement in (
            "INSERT INTO durable_job.slots (endpoint, model, tokens, job_id, principal, taken_at) VALUES ('http://127.0.0.1:9/v1', 'gpt-test', 0, 'job-a', 'x', now())",
            "UPDATE durable_job.slots SET taken_at = now() - interval '1 hour'",
            "DELETE FROM durable_job.slots",
            "INSERT INTO durable_job.slot_waits VALUES ('job-a', 'e', 'm', 'then', 'later')",
            "INSERT INTO durable_job.limits (endpoint, model, requests_per_minute, set_utc) VALUES ('http://x:1/v1', 'm', 1000000, 'now')",
            "UPDATE durable_job.limits SET requests_per_minute = 1000000",
            "DELETE FROM durable_job.limits",
        ):
            assert "permission denied" in refused(role_url, statement) or "row-level security" in refused(role_url, statement)
        assert "permission denied" in refused(role_url, "SET ROLE durable")
    # two slots a minute: the worker takes them; a third is a wait, and the job is marked waiting since then
    take = "SELECT durable_job.take_slot(%s, 'gpt-test', 100, 'job-a')"
    assert sql(worker, take, (ENDPOINT,)) == [(0.0,)]
    assert sql(worker, take, (ENDPOINT,)) == [(0.0,)]
    [(wait,)] = sql(worker, take, (ENDPOINT,))
    assert 55 < wait <= 61
    assert [r[0] for r in sql(store_url, "SELECT job_id FROM durable_job.slot_waits")] == ["job-a"]
    # a function in pg_temp named as take_slot's own (now(), count()) changes nothing: its search_path is fixed
    with psycopg.connect(worker, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION pg_temp.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT now() + interval '1 day' $$")
        conn.execute("CREATE FUNCTION pg_temp.count(anyelement) RETURNS bigint LANGUAGE sql AS $$ SELECT 0::bigint $$")
        conn.execute("SET search_path = pg_temp, durable_job, public")
        assert conn.execute(take, (ENDPOINT,)).fetchone()[0] > 55
    # nobody but a runner of the job takes a slot for it, and tokens are a count
    assert "runs no job" in refused(worker, "SELECT durable_job.take_slot(%s, 'gpt-test', 1, 'job-nobody')", (ENDPOINT,))
    assert "are a count" in refused(worker, "SELECT durable_job.take_slot(%s, 'gpt-test', -5, 'job-a')", (ENDPOINT,))
    assert sql(admin_url(store_url), "SELECT count(*), min(principal), max(principal) FROM durable_job.slots") == [(2, "worker", "worker")]
    # no limit on the pair: 0 at once, nothing written
    assert sql(worker, "SELECT durable_job.take_slot('http://elsewhere:1/v1', 'gpt-test', 1, 'job-a')") == [(0.0,)]
    assert sql(admin_url(store_url), "SELECT count(*) FROM durable_job.slots") == [(2,)]


def busiest_minute(times: list) -> int:
    """The most requests any 60-second window holds."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < start + 60) for i, start in enumerate(times)), default=0)


def test_eight_workers_under_one_shared_limit_send_no_call_the_provider_refuses(tmp_path, store_url, provider):
    """Eight `work` processes, one limit of 30 requests a minute on the provider they share, 40 one-item jobs; the
    provider answers 429 to anything above 30 in a sliding minute. Every job reaches review with no 429 in the
    provider's log and the busiest minute holding 27 to 30 requests; a worker SIGKILLed while every worker waits for a
    slot leaves nothing pending, and its jobs finish under the others."""
    from test_work import job_workspace, phases, worker

    provider.behave("limit:30")
    set_limit(store_url, 30, endpoint=provider.base_url.rstrip("/"))
    jobs = [job_workspace(tmp_path, store_url, n, provider) for n in range(40)]
    assert len(jobs[0].run("submit", "--store", store_url, *[w.manifest for w in jobs]).ok()["submits"]) == 40  # one command
    env = provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5")
    workers = [worker(store_url, "--until-idle", env=env) for _ in range(8)]
    try:
        admin = admin_url(store_url)
        # the first minute's 30 calls made and answered, the next jobs wait for a slot: no call is in flight then, so a
        # worker killed now is killed waiting (or between jobs), never mid-call
        waits = "SELECT (SELECT count(*) FROM durable_job.slot_waits), (SELECT count(*) FROM durable_job.calls WHERE status = 'pending')"
        wait_for(lambda: (lambda w, p: w >= 1 and p == 0)(*sql(admin, waits)[0]), timeout=150, interval=0.1)
        assert sql(admin, "SELECT count(*) FROM durable_job.slots")[0][0] >= 30
        waiting_pending = "SELECT count(*) FROM durable_job.calls c JOIN durable_job.slot_waits w USING (job_id) WHERE c.status = 'pending'"
        kill_group(workers[0])
        assert sql(admin, waiting_pending) == [(0,)]  # the kill left nothing pending for a waiting job
        outs = [w.communicate(timeout=180) for w in workers[1:]]
    finally:
        for w in workers:
            if w.poll() is None:
                kill_group(w)
    for w, (_, err) in zip(workers[1:], outs, strict=True):
        assert w.returncode == 0, err
    assert list(phases(store_url).values()) == ["awaiting-review"] * 40
    assert sql(admin, "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM durable_job.calls") == [(40, 40)]
    requests = provider.requests()
    assert [r["behaviour"] for r in requests] == ["ok"] * 40  # zero 429s: every call went out under the limit
    assert 27 <= busiest_minute([r["time"] for r in requests]) <= 30
    runs = [json.loads(out) for out, _ in outs]
    assert any(run["to"] == "waits-for-slot" for r in runs for run in r["runs"])


def test_a_run_with_no_slot_free_waits_holding_nothing_then_runs_on(tmp_path, store_url, provider):
    """The limit's two slots of this minute were taken 45 s ago (seeded as the administrator): `resume` journals nothing
    pending, holds no lock while it waits, `status` and `jobs` say it waits for a slot and since when; once a slot
    frees it runs on and reaches review, its call sent after the wait."""
    from conftest import ALPHA

    ws = openai_workspace(Workspace(tmp_path, store=store_url), provider, sources={"alpha": ALPHA}, jobId="job-paced")
    endpoint = provider.base_url.rstrip("/")
    set_limit(store_url, 2, endpoint=endpoint)
    ws.run("submit", "--manifest", ws.manifest, "--store", store_url).ok()
    seeded = "INSERT INTO durable_job.slots (endpoint, model, tokens, job_id, principal, taken_at) VALUES (%s, 'gpt-test', 1, 'job-paced', 'seed', now() - interval '45 seconds')"
    for _ in range(2):
        sql(admin_url(store_url), seeded, (endpoint,))
    began = time.time()
    run = ws.popen("resume")
    wait_for(lambda: sql(store_url, "SELECT count(*) FROM durable_job.slot_waits")[0][0] == 1, timeout=30, interval=0.1)
    status = ws.run("status").ok()
    assert status["waitsForSlot"]["since"].startswith(time.strftime("%Y-%m-%d", time.gmtime()))
    assert status["calls"] == [] and status.get("running") is None  # nothing pending, no lock held while it waits
    [row] = ws.run("jobs", "--store", store_url).ok()["jobs"]
    assert row["waitsForSlot"] == status["waitsForSlot"]
    assert "waits: for a slot since" in ws.run("jobs", "--store", store_url, "--text").stdout
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    assert "waits" in err and "holding no lock and no connection" in err
    assert [r["status"] for r in json.loads(out)["results"]] == ["validated"]
    [request] = provider.requests()
    assert request["time"] - began >= 10  # sent once the seeded slots were a minute and a second old
    assert sql(store_url, "SELECT count(*) FROM durable_job.slot_waits") == [(0,)]
    assert "waitsForSlot" not in ws.run("status").ok()


def test_a_state_directory_paces_its_calls_by_the_limit_in_its_environment(tmp_path, provider):
    """DURABLE_JOB_REQUESTS_PER_MINUTE=1, two items: the first call goes out, the second waits for the minute to pass,
    counted from the job's own journal, with nothing pending and the job's lock released (a `resume` without the limit,
    once the waiting run is killed, takes the job at once and finishes it). A bad value is one HOLD line."""
    from conftest import ALPHA, BETA

    ws = openai_workspace(Workspace(tmp_path), provider, sources={"alpha": ALPHA, "beta": BETA})
    run = ws.popen("start", "--manifest", ws.manifest, env={"DURABLE_JOB_REQUESTS_PER_MINUTE": "1"})
    try:
        wait_for(lambda: len(provider.requests()) == 1 and ws.db_rows()[-1:] and ws.db_rows()[-1][2] == "completed", timeout=60)
        wait_for(lambda: "waitsForSlot" in ws.run("status").ok(), timeout=60)  # the second item's call waits for its slot
        assert run.poll() is None and len(provider.requests()) == 1
        assert [r[2] for r in ws.db_rows()] == ["completed"]  # nothing pending while it waits
        [dispatch] = [e for e in ws.events(ws.db_rows()[0][0]) if e["event"] == "dispatch"]
        assert dispatch["detail"]["tokenBound"] > 500  # the bound a tokens-per-minute limit counts: input estimate and answer cap
        since = ws.run("status").ok()["waitsForSlot"]["since"]  # another terminal sees the wait, and since when
        assert since.endswith("Z") and "waits for a slot since " + since in ws.run("status", "--text").stdout
        [listed] = ws.run("jobs", "--root", str(tmp_path), state=False).ok()["jobs"]
        assert listed["waitsForSlot"] == {"since": since}
    finally:
        kill_group(run)
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated", "validated"]  # no lock was left held
    assert not os.path.exists(os.path.join(ws.state, "slot-wait.json"))  # the killed run's mark gone once a run went on
    assert len(provider.requests()) == 2
    other = openai_workspace(Workspace(tmp_path / "other"), provider, sources={"alpha": ALPHA})
    other.start(env={"DURABLE_JOB_REQUESTS_PER_MINUTE": "lots"}).held("DURABLE_JOB_REQUESTS_PER_MINUTE", "positive whole number")
    assert other.db_rows() == []


def test_the_web_list_says_which_job_waits_for_a_slot_and_since_when(tmp_path, store_url, pg_server):
    """A job the limit keeps waiting (its wait marked by take_slot itself, the worker's way) shows on serve's list as
    waiting for a slot since then; a job that waits for none says nothing of it."""
    from test_web import Serve, sign_in

    ws = Workspace(tmp_path, store=store_url)
    for job in ("job-waits", "job-free"):
        ws.write_manifest(jobId=job)
        ws.run("submit", "--manifest", ws.manifest, "--store", store_url).ok()
    set_limit(store_url, 1)
    worker = as_role(store_url, "worker")
    assert sql(worker, "SELECT durable_job.take_slot(%s, 'gpt-test', 1, 'job-free')", (ENDPOINT,)) == [(0.0,)]
    assert sql(worker, "SELECT durable_job.take_slot(%s, 'gpt-test', 1, 'job-waits')", (ENDPOINT,))[0][0] > 55
    [(since,)] = sql(store_url, "SELECT since_utc FROM durable_job.slot_waits")
    s = Serve(tmp_path, "--store", store_url)
    try:
        page = sign_in(s, "alice").get("/").text
    finally:
        s.kill()
    assert page.count("waits for a slot since") == 1 and f"waits for a slot since {since}" in page
    assert page.index("job-waits") < page.index("waits for a slot since") < page.index("job-free")


def test_a_worker_told_to_stop_ends_its_wait_for_a_slot_at_once(tmp_path, store_url, provider):
    """A worker whose job waits for a slot (the minute's one slot taken 5 s ago) stops on SIGTERM within seconds, not a
    minute later, sending nothing and leaving nothing pending; the job waits on, ready for the next worker."""
    import signal

    from test_work import job_workspace, worker

    endpoint = provider.base_url.rstrip("/")
    set_limit(store_url, 1, endpoint=endpoint)
    w = job_workspace(tmp_path, store_url, 0, provider)
    w.run("submit", "--manifest", w.manifest, "--store", store_url).ok()
    sql(
        admin_url(store_url),
        "INSERT INTO durable_job.slots (endpoint, model, tokens, job_id, principal, taken_at) VALUES (%s, 'gpt-test', 1, 'job-00', 'seed', now() - interval '5 seconds')",
        (endpoint,),
    )
    proc = worker(store_url, "--until-idle", env=provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))
    try:
        wait_for(lambda: sql(store_url, "SELECT count(*) FROM durable_job.slot_waits")[0][0] == 1, timeout=60, interval=0.1)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert time.monotonic() - stopped < 15 and proc.returncode == 0, err
    assert json.loads(out)["counts"] == {"waits-for-slot": 1} and "job job-00: not-started -> waits-for-slot" in err
    assert provider.requests() == [] and sql(store_url, "SELECT count(*) FROM durable_job.calls") == [(0,)]


def test_tokens_per_minute_count_each_calls_bound_against_the_limit(tmp_path, store_url):
    """100 requests but 1,000 tokens a minute: a 600-token call goes, a second 600 waits (until the first is a minute
    old), a 300 still fits; a lone call above the whole limit is never kept waiting for ever (an empty minute takes it)."""
    ws = Workspace(tmp_path, store=store_url)
    ws.write_manifest(jobId="job-t")
    ws.run("submit", "--manifest", ws.manifest, "--store", store_url).ok()
    set_limit(store_url, 100, tpm=1000)
    take = "SELECT durable_job.take_slot(%s, 'gpt-test', %s, 'job-t')"
    worker = as_role(store_url, "worker")
    assert sql(worker, take, (ENDPOINT, 600)) == [(0.0,)]
    [(wait,)] = sql(worker, take, (ENDPOINT, 600))
    assert 55 < wait <= 61
    assert sql(worker, take, (ENDPOINT, 300)) == [(0.0,)]
    sql(admin_url(store_url), "DELETE FROM durable_job.slots")
    assert sql(worker, take, (ENDPOINT, 5000)) == [(0.0,)]
