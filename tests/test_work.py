"""Many jobs, many machines (issue 14): `submit` queues jobs in a store, `work` processes run them.

Real PostgreSQL, the loopback provider, several real `work` processes killed and stopped with real signals.
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

from conftest import PROGRAM, RUN_PROGRAM, Workspace, as_role, clean_env, kill_group, run_inprocess, wait_for


def job_workspace(tmp_path, store: str, n: int, provider=None, items=("alpha",)) -> Workspace:
    """A folder with one job's manifest (jobId job-NN) and sources, addressed to the shared store."""
    from conftest import ALPHA, BETA, GAMMA

    texts = {"alpha": ALPHA, "beta": BETA, "gamma": GAMMA}
    w = Workspace(tmp_path / f"job{n:02d}", store=store)
    extra = {"mode": "openai", "model": "gpt-test"} if provider else {}
    w.write_manifest(sources={i: texts[i] for i in items}, jobId=f"job-{n:02d}", **extra)
    if provider:
        w.env.update(provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))
    return w


def submit_jobs(tmp_path, store, count, provider=None, items=("alpha",)) -> list:
    jobs = []
    for n in range(count):
        w = job_workspace(tmp_path, store, n, provider, items)
        out = w.run("submit", "--manifest", w.manifest, "--store", store).ok()
        assert out["phase"] == "not-started" and out["jobId"] == f"job-{n:02d}" and out["existing"] is False
        jobs.append(w)
    return jobs


def worker(store, *flags, env=None) -> subprocess.Popen:
    """A `work` process, logged in as the store's worker role (it runs any runnable job, and does nothing else); started
    through tests/run_program.py, its compiled code kept between runs (a script run compiled the file twice)."""
    full = clean_env()
    full.update(env or {})
    argv = [sys.executable, RUN_PROGRAM, PROGRAM, "work", "--store", as_role(store, "worker"), *flags]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)


def phases(store) -> dict:
    """Each job's phase as `jobs --store URL --json` lists them (a look at the result: run in this process)."""
    return {j["jobId"]: j["phase"] for j in run_inprocess(["jobs", "--store", store, "--json"], clean_env(), os.getcwd()).ok()["jobs"]}


def sent_keys(provider) -> list:
    return [r["client_request_id"] for r in provider.requests()]


def test_submitted_jobs_wait_until_a_worker_runs_them_all_to_review(tmp_path, store_url):
    jobs = submit_jobs(tmp_path, store_url, 3, items=("alpha", "beta"))
    assert set(phases(store_url).values()) == {"not-started"}
    again = jobs[0].run("submit", "--manifest", jobs[0].manifest, "--store", store_url).ok()  # the same job: reported, not re-sealed
    assert again["existing"] is True and again["phase"] == "not-started" and "work --store" in again["next"]
    proc = worker(store_url, "--until-idle", "--concurrency", "2")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["counts"] == {"awaiting-review": 3} and summary["stopped"] is False
    assert sorted(r["jobId"] for r in summary["runs"]) == ["job-00", "job-01", "job-02"]
    lines = err.strip().splitlines()
    assert sum("claimed (not-started)" in ln for ln in lines) == 3
    assert sum("not-started -> awaiting-review (validated, validated)" in ln for ln in lines) == 3
    assert all(f"work {os.uname().nodename.split('.')[0]}:{proc.pid}" in ln for ln in lines)
    assert set(phases(store_url).values()) == {"awaiting-review"}
    # a last worker finds nothing to do and says so
    idle = worker(store_url, "--until-idle")
    out, err = idle.communicate(timeout=60)
    assert idle.returncode == 0 and json.loads(out)["runs"] == []


def test_submit_refuses_another_request_under_a_taken_job_id_and_needs_a_store(tmp_path, store_url):
    (w,) = submit_jobs(tmp_path, store_url, 1)
    w.write_manifest(sources={"beta": "STRUCTURAL FIXTURE ONLY: other bytes.\n"}, jobId="job-00")
    w.run("submit", "--manifest", w.manifest, "--store", store_url).held("Existing job 'job-00'", "new jobId")
    plain = Workspace(tmp_path / "plain")
    plain.write_manifest()
    plain.run("submit", "--manifest", plain.manifest, state=False).held("UsageError", "--store URL")
    plain.run("work", "--until-idle", state=False).held("UsageError", "--store URL")
    plain.run("work", "--store", store_url, "--concurrency", "9", state=False).held("--concurrency 9", "1 to 8")


def test_a_job_needing_a_person_is_skipped_and_a_running_one_names_its_worker(tmp_path, store_url, provider):
    jobs = submit_jobs(tmp_path, store_url, 2, provider)
    provider.behave("slow:3")
    proc = worker(store_url, "--until-idle", env=jobs[0].env)
    wait_for(lambda: len(provider.requests()) >= 1, timeout=60)
    listing = subprocess.run(
        [sys.executable, PROGRAM, "jobs", "--store", store_url, "--json"], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    running = [j for j in json.loads(listing.stdout)["jobs"] if j["phase"] == "running"]
    assert len(running) == 1 and running[0]["runningBy"]["command"] == "work" and running[0]["runningBy"]["pid"] == proc.pid
    assert running[0]["runningBy"]["host"] == os.uname().nodename.split(".")[0]
    assert f"pid {proc.pid} on " in running[0]["next"]
    kill_group(proc)  # the in-flight call is now uncertain: no worker may take that job on
    uncertain = [j for j, p in phases(store_url).items() if p == "uncertain-call"]
    assert len(uncertain) == 1
    provider.behave("ok")
    again = worker(store_url, "--until-idle", env=jobs[0].env)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert [r["jobId"] for r in json.loads(out)["runs"]] == [j for j in phases(store_url) if j not in uncertain]
    assert phases(store_url)[uncertain[0]] == "uncertain-call"
    assert len(sent_keys(provider)) == len(set(sent_keys(provider))) == 2


def test_sigterm_mid_call_lets_the_call_finish_sends_nothing_new_and_exits(tmp_path, store_url, provider):
    (w,) = submit_jobs(tmp_path, store_url, 1, provider, items=("alpha", "beta"))
    provider.behave("held")  # the call in flight is answered once the worker has said it takes no new job
    proc = worker(store_url, env=w.env)  # polling: only the signal ends it
    said: list = []

    def read_stderr():
        for line in proc.stderr:
            said.append(line)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    wait_for(lambda: len(provider.requests()) >= 1, timeout=60)
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: any("SIGTERM: taking no new job" in line for line in said), timeout=30)
    provider.release()
    out = proc.stdout.read()
    proc.wait(timeout=30)
    reader.join(timeout=30)
    err = "".join(said)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["stopped"] is True and summary["runs"][0]["to"] == "ready" and "WorkerStopping" in summary["runs"][0]["hold"]
    assert "SIGTERM: taking no new job" in err
    assert len(provider.requests()) == 1  # the second item's call was never sent
    status = w.run("status", "--job", "job-00").ok()
    assert status["phase"] == "ready" and [c[2] for c in status["calls"]] == ["completed"]
    provider.behave("ok")
    done = worker(store_url, "--until-idle", env=w.env)
    out, err = done.communicate(timeout=60)
    assert json.loads(out)["counts"] == {"awaiting-review": 1}
    assert len(sent_keys(provider)) == len(set(sent_keys(provider))) == 2


def test_random_sigkills_of_several_workers_never_send_an_operation_key_twice(tmp_path, store_url, provider):
    count = int(os.environ.get("DURABLE_JOB_WORK_JOBS", "20"))
    jobs = submit_jobs(tmp_path, store_url, count, provider)
    provider.behave("slow:0.4")
    env = jobs[0].env
    rng = random.Random(int(os.environ.get("DURABLE_JOB_FUZZ_SEED", "14")))
    workers = [worker(store_url, "--concurrency", "2", env=env) for _ in range(3)]
    kills = 0
    for _ in range(6):  # each kill lands while calls are in flight: after a request arrived, before its answer
        seen = len(provider.requests())
        try:
            wait_for(lambda seen=seen: len(provider.requests()) > seen, timeout=30)
        except AssertionError:
            break  # nothing left to send
        time.sleep(rng.uniform(0.0, 0.3))
        victim = rng.randrange(len(workers))
        kill_group(workers[victim])
        kills += 1
        workers[victim] = worker(store_url, "--concurrency", "2", env=env)
    for p in workers:  # the survivors stop cleanly: no new job, no new call
        p.send_signal(signal.SIGTERM)
    for p in workers:  # 0, or -SIGTERM for one still starting up (no handler yet, nothing taken on)
        assert p.wait(timeout=60) in (0, -signal.SIGTERM)
    finishers = [worker(store_url, "--until-idle", "--concurrency", "2", env=env) for _ in range(2)]
    for p in finishers:
        p.communicate(timeout=180)
    states = phases(store_url)
    assert set(states.values()) <= {"awaiting-review", "uncertain-call"}, states
    print(f"{kills} kills; {sum(p == 'uncertain-call' for p in states.values())} of {count} jobs on an uncertain call")
    keys = sent_keys(provider)
    assert len(keys) == len(set(keys)), "an operation key reached the provider twice"
    # a person reconciles every uncertain call; one last worker brings everything to review
    for w in jobs:
        if states[w.job_id()] == "uncertain-call":
            for key, _item, status, *_ in w.run("status", "--job", w.job_id()).ok()["calls"]:
                if status == "pending":
                    w.run(
                        "reconcile",
                        "--job",
                        w.job_id(),
                        "--operation-key",
                        key,
                        "--action",
                        "abandon",
                        "--reviewer",
                        "ops",
                        "--reason",
                        "not in the provider's log",
                    ).ok()
    last = worker(store_url, "--until-idle", "--concurrency", "4", env=env)
    out, err = last.communicate(timeout=180)
    assert last.returncode == 0, err
    assert set(phases(store_url).values()) == {"awaiting-review"}
    keys = sent_keys(provider)
    assert len(keys) == len(set(keys))


def test_a_refused_call_is_left_for_a_person_and_taken_on_again_once_resumed(tmp_path, store_url, provider):
    (w,) = submit_jobs(tmp_path, store_url, 1, provider)
    provider.behave("401")
    first = worker(store_url, "--until-idle", env=w.env)
    out, err = first.communicate(timeout=120)
    run = json.loads(out)["runs"][0]
    assert run["to"] == "ready" and "ProviderError" in run["hold"] and "rejected" in run["hold"] and run["held"] is True
    assert first.returncode == 2 and "HOLD: JobError: work held 1 job, each left for a person: job job-00: ProviderError" in err
    again = worker(store_url, "--until-idle", env=w.env)  # a refusal waits for a person: no worker spends another attempt
    out, err = again.communicate(timeout=60)
    assert json.loads(out)["runs"] == [] and len(provider.requests()) == 1
    provider.behave("ok")
    assert w.run("resume", "--job", "job-00").ok()["interrupt"]  # the person fixed the cause and resumed
    assert len(provider.requests()) == 2
