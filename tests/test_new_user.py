"""What a new user tripped over, from the README alone (issue 19, items 10-17).

The contract page in the repository, `jobs --root` on the README's own layout, Ctrl-C during a slow
call, what `status` offers while a run holds the job, a gateway that logs no response id, `seal` with
DURABLE_JOB_STORE set, and a `next` step of one command a line.
"""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import durable_job as dj
from conftest import ALPHA, PROGRAM, REPO, Workspace, clean_env, kill_group, openai_workspace, wait_for
from durable_job_team import store as team_store

CONTRACT = os.path.join(REPO, "docs", "CONTRACT.md")


def contract_text() -> str:
    with open(CONTRACT, encoding="utf-8") as fh:
        return fh.read()


# --- 10. the contract lives in the repository -----------------------------------------------------------------


def test_the_readme_links_the_contract_page_and_needs_no_file_outside_the_repository():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    assert "docs/CONTRACT.md" in readme
    for path in [os.path.join(REPO, "README.md"), *glob.glob(os.path.join(REPO, "docs", "*.md"))]:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        assert "../shared" not in text and "SPEC.md" not in text.replace("CONTRACT.md", ""), path


def test_the_contract_page_names_every_command_flag_manifest_key_journal_column_and_error_type():
    """A drift between the program and its contract page fails here: each name the program knows is on the page."""
    page = contract_text()
    for name, command in {**dj.COMMANDS, **dj.load_team("the contract page").commands}.items():  # the core's and the team's
        assert f"`{name}" in page, name
        for flag_name in command.flag_names():
            if flag_name.startswith("--"):
                assert flag_name in page, (name, flag_name)
    for key in dj.MANIFEST_KEYS | dj.ITEM_KEYS | dj.MCP_KEYS:
        assert f"`{key}`" in page, key
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        db = dj.ledger(os.path.join(folder, "effects.sqlite"))
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'")]
        columns = {r[1] for t in tables for r in db.execute(f"PRAGMA table_info({t})")}
        db.close()
    assert isinstance(db, sqlite3.Connection) and {"calls", "call_events", "drafts", "outcomes", "_migrations"} <= set(tables)
    for column in columns:
        assert f"`{column}`" in page, column
    for table in team_store.STORE_TABLES:  # a store's tables too, the new ones (who acts, who may) among them
        assert f"`{table}`" in page, table
    for column in ("owner", "reviewers", "sealed_at", "recorded_at", "thread_id", "kind", "granted_at"):
        assert f"`{column}`" in page, column
    for error in [c for c in vars(dj).values() if isinstance(c, type) and issubclass(c, dj.JobError)]:
        assert f"`{error.__name__}`" in page, error.__name__
    for point in dj.CRASH_POINTS:
        assert f"`{point}`" in page, point
    for phrase in (
        "UNCERTAIN_CALL",
        "Checkpoint graph version changed",
        "Executable bytes changed",
        "Final decision already recorded",
        "Cannot accept",
        "Source bound/hash/size failure",
        "stale: results changed since review",
    ):
        assert phrase in page, phrase


def test_the_contract_page_states_the_answer_format_the_model_must_return():
    page = contract_text()
    for rule in (
        "itemId",
        "summary",
        "citations",
        "quote",
        "claim",
        "1-500 characters",
        "at least 12 characters",
        "exact substring",
        "1-3 citations",
    ):
        assert rule in page, rule


# --- 11. jobs --root finds state directories at any depth -------------------------------------------------------


def test_jobs_root_finds_the_readmes_layout_at_any_depth_in_several_roots(tmp_path):
    made = {}
    for folder, job_id in (("jobs/q3/state", "q3-review"), ("jobs/2026/q4/deep/state", "q4-review"), ("other/state", "other")):
        w = Workspace(tmp_path / folder.replace("/", "_"), inprocess=True)
        w.state = str(tmp_path / folder)
        w.write_manifest(jobId=job_id)
        w.start().ok()
        made[job_id] = w.state
    os.makedirs(tmp_path / "jobs" / "q3" / "state" / "inner")  # inside a state directory: not searched
    os.symlink(tmp_path / "other", tmp_path / "jobs" / "link-to-other")  # a symlinked folder is not followed
    with open(tmp_path / "jobs" / "notes.txt", "w") as fh:
        fh.write("not a job")
    w = Workspace(tmp_path / "runner", inprocess=True)
    listed = w.run("jobs", "--root", str(tmp_path / "jobs"), state=False).ok()["jobs"]
    assert [j["jobId"] for j in listed] == ["q4-review", "q3-review"]  # path order: jobs/2026/… before jobs/q3/…
    both = w.run("jobs", "--root", str(tmp_path / "jobs"), "--root", str(tmp_path / "other"), state=False).ok()["jobs"]
    assert sorted(j["jobId"] for j in both) == ["other", "q3-review", "q4-review"]
    assert all(j["phase"] == "awaiting-review" for j in both)
    w.run("jobs", "--root", str(tmp_path / "missing"), state=False).held("UsageError", "is not a folder")


# --- 13. Ctrl-C during a slow call ---------------------------------------------------------------------------


def interrupt_when(ws: Workspace, provider, argv: list, requests: int) -> tuple:
    """Start a command, press Ctrl-C (SIGINT to its process group, as a terminal does) once `requests` calls
    have reached the slow provider; return (exit code, stderr, seconds from the signal to the exit)."""
    proc = ws.popen(*argv)
    wait_for(lambda: len(provider.requests()) >= requests, timeout=60)
    time.sleep(0.2)
    pressed = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err, time.monotonic() - pressed


def test_ctrl_c_during_parallel_calls_ends_at_once_naming_the_calls_left_pending(tmp_path, provider):
    ws = openai_workspace(Workspace(tmp_path, inprocess=False), provider, maxConcurrentCalls=2)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "60"
    provider.behave("slow:40")  # the answers would come after 40 s: the command must not wait for them
    code, err, seconds = interrupt_when(ws, provider, ["start", "--manifest", ws.manifest], 2)
    assert code == 2 and seconds < 5, (seconds, err)
    pending = [r[0] for r in ws.db_rows() if r[2] == "pending"]
    assert len(pending) == 2
    line = err.strip().splitlines()[-1]
    assert line.startswith("HOLD: Interrupted: stopped by Ctrl-C while call ") and pending[0] in line, line
    assert "stays pending" in line and "(and 1 more" in line and f"reconcile --state-dir {ws.state} --operation-key {pending[0]}" in line
    assert line.endswith(f"then python {PROGRAM} resume --state-dir {ws.state}")


def test_ctrl_c_during_a_retry_ends_at_once_and_names_review_not_resume(tmp_path, provider):
    ws = openai_workspace(Workspace(tmp_path, inprocess=False), provider, sources={"alpha": ALPHA})
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "60"
    provider.behave("not-json")
    ws.start().ok()
    provider.behave("slow:40")
    code, err, seconds = interrupt_when(ws, provider, ["retry", "--item", "alpha", "--reviewer", "r", "--reason", "x"], 2)
    assert code == 2 and seconds < 5, (seconds, err)
    line = err.strip().splitlines()[-1]
    assert "stays pending" in line and line.endswith("then review and decide (nothing to resume)"), line
    status = ws.run("status").ok()
    assert status["phase"] == "uncertain-call" and "resume --state-dir" not in status["next"]
    assert "review and decide (nothing to resume)" in status["next"]


def test_ctrl_c_stops_a_worker_gracefully_says_so_at_once_and_a_second_one_exits(tmp_path, store_url, provider):
    from test_work import submit_jobs

    (w,) = submit_jobs(tmp_path, store_url, 1, provider, items=("alpha", "beta"))
    w.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "60"
    provider.behave("slow:30")
    log = tmp_path / "worker.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, PROGRAM, "work", "--store", store_url],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**clean_env(), **w.env},
            start_new_session=True,
        )
    wait_for(lambda: len(provider.requests()) >= 1, timeout=60)
    os.killpg(proc.pid, signal.SIGINT)
    wait_for(lambda: "SIGINT: taking no new job; letting in-flight calls end (a second signal exits at once)" in log.read_text(), timeout=3)
    assert proc.poll() is None  # the call in flight is let end: the first Ctrl-C is a graceful stop
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=10)
    assert proc.returncode == 2 and "second signal: exiting now" in log.read_text()
    assert w.run("status", "--job", "job-00").ok()["phase"] == "uncertain-call"  # as a kill would leave it


# --- 14. while a run holds the job, status offers only waiting ---------------------------------------------------


def test_status_text_offers_nothing_but_waiting_while_a_call_is_in_flight(tmp_path, provider):
    ws = openai_workspace(Workspace(tmp_path, inprocess=False), provider, sources={"alpha": ALPHA})
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "60"
    provider.behave("slow:8")
    proc = ws.popen("start", "--manifest", ws.manifest)
    try:
        wait_for(lambda: provider.requests(), timeout=60)
        text = ws.run("status", "--text").stdout
        assert "phase: running" in text and "next: wait: start" in text
        assert "reconcile" not in text, text
    finally:  # what the call answers is not this journey's: the start ends here (its call stays pending)
        kill_group(proc)
        proc.communicate(timeout=60)


# --- 15. a gateway that logs no response id --------------------------------------------------------------------


def test_reconcile_without_a_response_id_says_what_to_give_instead(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.db_rows()[0][0]
    answer = os.path.join(ws.root, "answer.json")
    with open(answer, "w") as fh:
        json.dump({"outputText": "{}"}, fh)
    line = ws.run(
        "reconcile", "--operation-key", key, "--action", "complete", "--response-file", answer, "--reviewer", "r", "--reason", "x"
    ).held("responseId")
    assert "self-hosted gateway" in line and "--reason" in line and "log line" in line
    ws.run("reconcile", "--operation-key", key, "--action", "complete", "--reviewer", "r", "--reason", "x").held(
        "needs --response-file", "self-hosted gateway"
    )


# --- 16. seal with DURABLE_JOB_STORE set -------------------------------------------------------------------------


def test_seal_with_a_store_in_the_environment_suggests_the_stores_start(ws, store_url):
    out = ws.run(
        "seal",
        "--out",
        os.path.join(ws.root, "m.json"),
        "--job-id",
        "q9",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        os.path.join(ws.src, "alpha.txt"),
        "--text",
        env={"DURABLE_JOB_STORE": store_url},
    ).stdout
    nxt = [line for line in out.splitlines() if line.strip().startswith("next:")]
    assert nxt == [f"  next: python {PROGRAM} start --job q9 --manifest {os.path.join(ws.root, 'm.json')}"], out
    assert "--state-dir" not in out


def test_the_walk_throughs_revise_example_gives_the_citations_file():
    """The walk-through's `revise` (docs/real-job.md, moved there from the README) passes the citations file."""
    with open(os.path.join(REPO, "docs", "real-job.md"), encoding="utf-8") as fh:
        page = fh.read()
    example = page[page.index("durable_job.py revise ") :]
    example = example[: example.index("\n\n")]
    assert "--citations-file" in example, example


# --- 17. one suggestion a line ---------------------------------------------------------------------------------


def test_the_next_step_of_a_failed_item_is_one_command_a_line(ws):
    ws.write_manifest(maxModelCalls=1, sources={"alpha": ALPHA, "beta": ALPHA.replace("Alpha", "Beta")})
    ws.start().ok()
    status = ws.run("status").ok()
    lines = status["next"].split("\n")
    assert lines[0].startswith("item beta failed (no model call left") and len(lines) == 3
    commands = [line for line in lines[1:]]
    assert [c.split(": ", 1)[0] for c in commands] == ["revise it by hand", "or decide"]
    for line in lines:
        assert line.count(f"python {PROGRAM} ") <= 1, line
    text = ws.run("status", "--text").stdout.splitlines()
    at = next(n for n, line in enumerate(text) if line.startswith("  next: item beta failed"))
    assert text[at + 1].strip() == lines[1] and text[at + 2].strip() == lines[2]
    assert max(len(line) for line in text) < 400
