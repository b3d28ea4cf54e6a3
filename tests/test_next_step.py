"""What the job says it is doing and what to do next: `phase` and `next` in status and inspect,
and the commands every HOLD line and `next` suggest, pasted as they are printed.

Each journey here failed on the program before issue 15 (items 1, 3, 5, 6 and 8).
"""

import os
import re
import shlex

from conftest import PROGRAM, kill_group, openai_workspace, paste, wait_for


def pending_rows(ws) -> list:
    try:
        return [r for r in ws.db_rows() if r[2] == "pending"]
    except Exception:  # the journal is being created
        return []


def backticked(line: str, word: str) -> str:
    """The command quoted in a HOLD line that runs `word`."""
    found = [c for c in re.findall(r"`([^`]+)`", line) if f" {word} " in f" {c} "]
    assert found, f"no {word} command in {line!r}"
    return found[0]


# --- 15.1: a call in flight is not an uncertain call --------------------------------------------------


def test_a_call_in_flight_is_running_with_its_holder_and_next_says_wait(ws, provider):
    openai_workspace(ws, provider)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "30"
    provider.behave(by_input={"Alpha report": "held"})  # answered once the test has looked, however loaded the machine
    proc = ws.popen("start", "--manifest", ws.manifest)
    try:
        [(key, item, _, _)] = wait_for(lambda: pending_rows(ws), timeout=60)
        for command in ("status", "inspect"):
            out = ws.run(command).ok()
            assert out["phase"] == "running", out
            holder = out["running"]
            assert holder["pid"] == proc.pid and holder["command"] == "start" and holder["sinceUtc"]
            assert holder["calls"] == [{"operationKey": key, "itemId": item}]
            assert out["next"].startswith("wait: start (pid") and key in out["next"], out["next"]
            assert "reconcile" not in out["next"]
        text = ws.run("status", "--text").stdout
        assert "phase: running" in text and "next: wait: start" in text
    finally:
        provider.release()
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_a_pending_call_whose_run_was_killed_is_uncertain(ws, provider):
    openai_workspace(ws, provider)
    provider.behave(by_input={"Alpha report": "hang"})
    proc = ws.popen("start", "--manifest", ws.manifest)
    [(key, item, _, _)] = wait_for(lambda: pending_rows(ws), timeout=60)
    assert ws.run("status").ok()["phase"] == "running"
    kill_group(proc)
    status = ws.run("status").ok()
    assert status["phase"] == "uncertain-call" and "running" not in status
    assert status["next"].startswith(f"UNCERTAIN_CALL {item} {key}") and " reconcile " in status["next"]


# --- 15.3: every suggested command is complete and paste-ready ------------------------------------------


def test_the_uncertain_call_hold_line_suggests_a_reconcile_that_runs_as_pasted(ws, provider):
    openai_workspace(ws, provider)
    provider.behave(by_input={"Alpha report": "500"})
    failed = ws.start().held("ProviderError")
    command = backticked(failed, "reconcile")
    assert f"--state-dir {shlex.quote(ws.state)}" in command and "--operation-key" in command
    held = ws.run("resume").held("UNCERTAIN_CALL")
    assert backticked(held, "reconcile") == command
    assert ws.run("status").ok()["next"].split(", then ")[1].split("; then ")[0] == command
    assert paste(ws, backticked(held, "status"), cwd="/").ok()["phase"] == "uncertain-call"

    out = paste(ws, command, cwd="/", **{"complete|abandon": "abandon", "YOU": "ops", "WHY": "provider shows no such request"}).ok()
    assert out["status"] == "abandoned"
    provider.behave("ok")
    assert paste(ws, ws.run("status").ok()["next"], cwd="/").ok()["interrupt"]  # next: the resume command, as printed


def test_a_state_dir_with_spaces_is_quoted_in_every_suggestion(ws):
    ws.state = os.path.join(ws.root, "state dir; with 'quotes'")
    ws.run("start", "--manifest", ws.manifest, env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"})
    status = ws.run("status").ok()
    reconcile = status["next"].split(", then ")[1].split("; then ")[0]
    assert paste(ws, reconcile, cwd="/", **{"complete|abandon": "abandon", "YOU": "ops", "WHY": "never sent"}).ok()["status"] == "abandoned"
    decide = paste(ws, ws.run("status").ok()["next"], cwd="/").ok()["interrupt"][0]["decideCommand"]
    decided = paste(ws, decide, cwd="/", **{"accept|reject|hold": "hold", "YOU": "dana", "WHY": "pasted"}).ok()
    assert decided["final"]["decision"] == "hold" and decided["final"]["bound"] is True


# --- 15.5: a finished job says what it is before asking for provider settings ---------------------------


def test_resume_on_a_decided_or_cancelled_openai_job_needs_no_api_key(ws, provider, tmp_path):
    openai_workspace(ws, provider)
    ws.start().ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    del ws.env["OPENAI_API_KEY"]
    for command in (("resume",), ("start", "--manifest", ws.manifest)):
        out = ws.run(*command).ok()
        assert out["final"]["decision"] == "hold" and out["interrupt"] == []

    other = type(ws)(tmp_path / "other")
    other.write_manifest()
    openai_workspace(other, provider)
    other.start().ok()
    other.run("cancel", "--reviewer", "r", "--reason", "not needed").ok()
    del other.env["OPENAI_API_KEY"]
    for command in (("resume",), ("start", "--manifest", other.manifest)):
        line = other.run(*command).held("DecisionError", "was cancelled by r")
        assert "OPENAI_API_KEY" not in line


def test_a_job_that_may_still_call_the_model_still_needs_the_key(ws, provider):
    openai_workspace(ws, provider)
    provider.behave(by_input={"Alpha report": "429-quota"})
    ws.start().held("rejected")
    ws.env.pop("OPENAI_API_KEY")
    ws.run("resume").held("OPENAI_API_KEY")


# --- 15.6: nothing runs, so the phase is `ready` ----------------------------------------------------------


def test_after_a_reconcile_the_job_is_ready_and_next_is_resume(ws, tmp_path):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    [(key, *_)] = ws.db_rows()
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "r", "--reason", "x").ok()
    resume = f"python {PROGRAM} resume --state-dir {ws.state}"
    for command in ("status", "inspect"):
        out = ws.run(command).ok()
        assert out["phase"] == "ready" and out["next"] == resume, out
    page = tmp_path / "page.html"
    ws.run("inspect", "--html", str(page)).ok()
    assert ">ready</span>" in page.read_text() and resume in page.read_text()


def test_after_a_rejected_call_the_job_is_ready(ws, provider):
    openai_workspace(ws, provider)
    provider.behave(by_input={"Alpha report": "429-quota"})
    ws.start().held("rejected")
    status = ws.run("status").ok()
    assert status["phase"] == "ready" and "rejected" in status["next"] and status["next"].endswith(f"resume --state-dir {ws.state}")


# --- 15.8: inspect says what status says --------------------------------------------------------------------


def test_inspect_prints_the_same_next_as_status_in_json_and_text(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    status, inspected = ws.run("status").ok(), ws.run("inspect").ok()
    assert inspected["next"] == status["next"] and status["next"].startswith("UNCERTAIN_CALL alpha")
    assert f"next: {status['next']}" in ws.run("inspect", "--text").stdout

    with open(ws.manifest, "ab") as fh:
        fh.write(b" ")  # a broken seal: nothing runs until it is restored
    status, inspected = ws.run("status").ok(), ws.run("inspect").ok()
    assert status["next"].startswith("restore what sealBroken names") and inspected["next"] == status["next"]
    assert inspected["sealBroken"] == status["sealBroken"]
    assert f"next: {status['next']}" in ws.run("inspect", "--text").stdout


def test_a_failed_item_s_reason_in_next_is_cut_at_a_word_and_its_commands_are_whole(ws, provider):
    """The model answered prose, not JSON: the item failed, and `next` names why in short before the ways on. The short
    reason ends on a whole word and an ellipsis (on main: `…this document be…`), and each way on pastes and runs."""
    openai_workspace(ws, provider, sources={"alpha": "The pilot opened in March.\n"})
    provider.behave("answer:Sorry, I cannot summarise this document because the requested information is unavailable today")
    ws.run("start", "--manifest", ws.manifest).ok()
    status = ws.run("status").ok()
    said = re.match(r"item alpha failed \((.*)\); the ways on, one a line:$", status["next"].split("\n")[0])
    assert said, status["next"]
    reason = said.group(1)
    full = status["results"][0]["reason"]
    assert len(reason) <= 120 and reason.endswith("…") and full.startswith(reason[:-1]), (reason, full)
    assert full[len(reason) - 1] == " ", f"cut inside a word: {reason!r} of {full!r}"
    text = ws.run("status", "--text").stdout
    assert f"  next: item alpha failed ({reason})" in text
    retry = backticked(f"`{status['next'].split(chr(10))[1].split(': ', 1)[1]}`", "retry")
    assert paste(ws, retry, **{"YOU": "dana", "WHY": "try again"}).ok()["attempt"] == 2


# --- the storage seam ---------------------------------------------------------------------------------------


def test_commands_reach_a_jobs_storage_only_through_its_store():
    """No command of the API names sqlite3, a state-directory file or a storage helper: a backend plugs in behind
    the Store interface without editing any command; and each `cmd_*` only hands its flags to its command."""
    import ast

    import durable_job as dj

    storage = {
        "sqlite3",
        "ledger",
        "read_journal",
        "connect_sqlite",
        "RunLock",
        "job_path",
        "load_job_file",
        "check_state_files",
        "SqliteJournal",
        "PgJournal",
        "StateDirStore",
        "PgStore",
        "SqliteCheckpointRows",
        "PgCheckpointRows",
        "JOB_FILE",
        "EFFECTS_FILE",
        "CHECKPOINTS_FILE",
        "RECEIPT_FILE",
        "LOCK_FILE",
    }
    with open(dj.__file__, encoding="utf-8") as fh:
        tree = {f.name: f for f in ast.parse(fh.read()).body if isinstance(f, ast.FunctionDef)}
    api = ("start", "resume", "status", "inspect", "reconcile", "decide", "revise", "retry", "cancel", "verify")
    for name in api:
        names = {n.id for n in ast.walk(tree[name]) if isinstance(n, ast.Name)}
        assert not names & storage, (name, names & storage)
    for name in api:
        cli = tree[f"cmd_{name}"]
        called = {n.func.id for n in ast.walk(cli) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert name in called and "store_from" in called, (cli.name, called)
        allowed = {name, "store_from", "with_manifests_job", "cast", "flags_of", "signing_key", "verify_receipt_alone"}
        allowed.add("set_up_by_its_administrator")  # start's refusal on a store not set up, in words for its reader (no storage)
        allowed.add("paced")  # the command API's own wait between runs while a limit keeps the job waiting for a slot
        assert called <= allowed, (cli.name, called)
