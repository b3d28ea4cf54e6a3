"""The core journeys: start, crash here, resume, reconcile, decide — through the real CLI and real SQLite files."""

import json
import os
import re
import shlex
import sqlite3
import stat

import pytest

import durable_job as dj
from conftest import (
    ALPHA,
    BETA,
    BOTH,
    FAKE_KEY,
    PROGRAM,
    Workspace,
    canonical,
    copy_program,
    engine_digest,
    hold_run_lock,
    in_the_engine,
    sha256,
)


def statuses(result_json):
    return [(r["itemId"], r["status"]) for r in result_json["results"]]


# --- the happy path ---------------------------------------------------------------------------------


@BOTH
def test_full_journey_to_accept_then_second_decision_refused(ws):
    """A person starts the demo-like job, reviews it, accepts it once; a second decision is refused."""
    started = ws.start().ok()
    assert started["index"] == 2 and started["final"] is None and started["existing"] is False
    assert statuses(started) == [("alpha", "validated"), ("beta", "validated")]
    bundle = started["interrupt"][0]
    job = ws.job()
    assert {k: bundle[k] for k in ("jobId", "manifestSha256", "engineSha256", "release", "version")} == {
        "jobId": "journey",
        "manifestSha256": job["manifestSha256"],
        "engineSha256": job["engineSha256"],
        "release": dj.__version__,
        "version": dj.VERSION,
    }
    assert bundle["statuses"] == {"alpha": "validated", "beta": "validated"}

    inspected = ws.run("inspect").ok()
    assert inspected["resultsSha256"] == bundle["resultsSha256"] == sha256(canonical(inspected["results"]))
    assert inspected["results"][0]["summary"] == ALPHA.splitlines()[0]
    assert inspected["results"][0]["citations"][0]["quote"] in ALPHA

    decided = ws.run("decide", "--decision", "accept", "--reviewer", "rev", "--reason", "quotes match").ok()
    final = decided["final"]
    assert final["decision"] == "accept" and final["reviewer"] == "rev" and final["reason"] == "quotes match"
    assert final["resultsSha256"] == bundle["resultsSha256"] and decided["interrupt"] == []
    assert len(final["decidedAtUtc"]) == len("2026-01-01T00:00:00.000000Z") and final["decidedAtUtc"].endswith("Z")

    ws.run("decide", "--decision", "reject", "--reviewer", "rev2", "--reason", "changed my mind").held("Final decision already recorded")
    assert ws.run("inspect").ok()["final"] == final
    receipt = ws.receipt()
    assert receipt["final"] == final and receipt["resultsSha256"] == bundle["resultsSha256"]


def test_state_files_are_what_the_contract_promises(ws):
    """job.json holds the sealed fields; the journal is WAL; the directory is private."""
    ws.start().ok()
    job = ws.job()
    with open(ws.manifest, "rb") as fh:
        assert job["manifestSha256"] == sha256(fh.read())
    assert job["manifestPath"] == os.path.abspath(ws.manifest) and job["mode"] == "fake"
    assert job["engineSha256"] == engine_digest() and job["version"] == dj.VERSION and "codeSha256" not in job
    assert set(job["dependencies"]) == set(dj.DEPENDENCIES)
    assert stat.S_IMODE(os.stat(ws.state).st_mode) == 0o700
    for name in ("job.json", "effects.sqlite", "run.lock"):
        assert stat.S_IMODE(os.stat(os.path.join(ws.state, name)).st_mode) == 0o600, name
    assert not os.path.exists(os.path.join(ws.state, "checkpoints.sqlite"))  # the checkpoints live in the journal's file
    conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in conn.execute("PRAGMA table_info(calls)")]
    assert cols == [
        "operation_key",
        "base_key",
        "attempt",
        "item_id",
        "input_sha256",
        "status",
        "output_text",
        "response_id",
        "request_id",
        "usage_json",
        "created_utc",
        "updated_utc",
        "reconciliation_json",
        "principal",
    ]
    status = ws.run("status").ok()
    assert [c[1:3] for c in status["calls"]] == [["alpha", "completed"], ["beta", "completed"]]
    created = [r[0] for r in conn.execute("SELECT created_utc FROM calls ORDER BY rowid")]
    assert created == sorted(created)


# --- crashes and recovery ---------------------------------------------------------------------------


@BOTH
def test_crash_before_ledger_then_abandon_and_resume(ws):
    """The provider answered but the process died before `completed`: the call is uncertain, never repeated."""
    crashed = ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"})
    assert crashed.code == 91
    rows = ws.db_rows()
    assert [(r[1], r[2]) for r in rows] == [("alpha", "pending")]
    key = rows[0][0]

    ws.run("resume").held("UncertainCall", f"UNCERTAIN_CALL alpha {key}")
    ws.run("resume").held(f"UNCERTAIN_CALL alpha {key}")  # still refused: nothing was sent again
    assert len(ws.db_rows()) == 1

    status = ws.run("status").ok()
    assert status["calls"][0][:3] == [key, "alpha", "pending"] and "reconcile" in status["next"]
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "ops", "--reason", "provider shows no usage").ok()
    resumed = ws.run("resume").ok()
    assert statuses(resumed) == [("alpha", "validated"), ("beta", "validated")]
    rows = ws.db_rows()
    assert [(r[1], r[2], r[3]) for r in rows] == [("alpha", "abandoned", 1), ("alpha", "completed", 2), ("beta", "completed", 1)]
    assert rows[1][0] == key[:-2] + ":2"
    record = json.loads(ws.db_rows("SELECT reconciliation_json FROM calls WHERE status='abandoned'")[0][0])
    assert record["reviewer"] == "ops" and record["action"] == "abandon"


@BOTH
def test_crash_after_ledger_resumes_without_a_new_call(ws):
    """`completed` was committed, the checkpoint was not: resume reuses the saved output."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"}).code == 92
    before = ws.db_rows("SELECT operation_key, status, output_text, updated_utc FROM calls")
    assert [r[1] for r in before] == ["completed"]
    resumed = ws.run("resume").ok()
    assert statuses(resumed) == [("alpha", "validated"), ("beta", "validated")]
    after = ws.db_rows("SELECT operation_key, status, output_text, updated_utc FROM calls")
    assert after[0] == before[0] and len(after) == 2
    dispatches = ws.db_rows("SELECT count(*) FROM call_events WHERE event='dispatch'")[0][0]
    assert dispatches == 2  # one per item, never a repeat


@BOTH
def test_crash_before_first_checkpoint_resumes_from_the_sealed_start(ws):
    """job.json exists, no checkpoint yet: resume starts the thread instead of failing."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-seal"}).code == 93
    assert ws.has_job()
    assert ws.run("status").ok()["calls"] == []
    resumed = ws.run("resume").ok()
    assert resumed["index"] == 2 and len(resumed["interrupt"]) == 1


@BOTH
def test_reconcile_complete_from_an_inspected_response_file(ws, tmp_path):
    """A person finds the answer in the provider's records and completes the pending call with it."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    job = {"jobId": "journey", "model": "fake-structural-1", "mode": "fake"}
    item = {"id": "alpha", "sha256": sha256(ALPHA.encode())}
    text, response_id, request_id, _ = dj.call_model(job, item, ALPHA, dj.model_input(item, ALPHA, []))
    response_file = tmp_path / "response.json"
    response_file.write_text(json.dumps({"outputText": text, "responseId": response_id, "requestId": request_id}))

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"outputText": "", "responseId": "r"}))
    ws.run(
        "reconcile", "--operation-key", key, "--action", "complete", "--reviewer", "ops", "--reason", "x", "--response-file", str(bad)
    ).held("outputText")
    ws.run("reconcile", "--operation-key", key + "x", "--action", "abandon", "--reviewer", "ops", "--reason", "x").held(
        "cannot be reconciled"
    )
    padded = tmp_path / "padded.json"  # valid JSON, but past the bound: refused whole, never hashed cut short
    padded.write_text(json.dumps({"outputText": text, "responseId": response_id}) + " " * (1 << 20))
    ws.run(
        "reconcile", "--operation-key", key, "--action", "complete", "--reviewer", "ops", "--reason", "x", "--response-file", str(padded)
    ).held("is over 1048576 bytes")

    done = ws.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--reviewer",
        "ops",
        "--reason",
        "found in provider log",
        "--response-file",
        str(response_file),
    ).ok()
    assert done["status"] == "completed"
    row = ws.db_rows(f"SELECT status, output_text, response_id, request_id, reconciliation_json FROM calls WHERE operation_key='{key}'")[0]
    assert row[:4] == ("completed", text, response_id, request_id)
    assert json.loads(row[4])["responseFileSha256"] == sha256(response_file.read_bytes())
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "ops", "--reason", "x").held("it is completed")

    resumed = ws.run("resume").ok()
    assert statuses(resumed) == [("alpha", "validated"), ("beta", "validated")]
    assert [r[2] for r in ws.db_rows()] == ["completed", "completed"]


# --- seals -------------------------------------------------------------------------------------------


def test_changed_source_is_refused_before_anything_runs(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"}).code == 92
    before = ws.state_bytes()
    ws.write_source("beta.txt", BETA.replace("one", "two"))
    ws.run("resume").held("Source bound/hash/size failure: beta")
    assert ws.state_bytes() == before


def test_changed_manifest_is_refused(ws):
    ws.start().ok()
    with open(ws.manifest, "ab") as fh:
        fh.write(b" ")
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").held("Manifest bytes changed")
    inspected = ws.run("inspect").ok()  # read-only commands still show the state, and say which seal broke
    assert "Manifest bytes changed" in inspected["sealBroken"] and inspected["final"] is None


@pytest.mark.parametrize("how", ["moved-away", "made-invalid", "replaced-by-a-folder"])
def test_a_sealed_manifest_moved_or_broken_is_named_at_its_path_and_restoring_it_continues(ws, how):
    """No flag can point a job at another manifest: every message says to restore the one at the sealed path."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-validate"}).code == 95
    with open(ws.manifest, "rb") as fh:
        approved = fh.read()
    os.unlink(ws.manifest)
    if how == "made-invalid":
        with open(ws.manifest, "wb") as fh:
            fh.write(b"{not json")
    elif how == "replaced-by-a-folder":
        os.mkdir(ws.manifest)
    ws.run("resume").held("SealError", "Manifest bytes changed", ws.manifest, "restore the approved manifest at that path")
    status = ws.run("status").ok()
    assert "Manifest bytes changed" in status["sealBroken"] and status["next"].startswith("restore what sealBroken names")
    if how == "replaced-by-a-folder":
        os.rmdir(ws.manifest)
    with open(ws.manifest, "wb") as fh:
        fh.write(approved)
    assert len(ws.run("resume").ok()["interrupt"]) == 1
    assert ws.run("status").ok()["next"].startswith(f"python {PROGRAM} decide")


def test_changed_version_label_is_refused(ws, tmp_path):
    ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"})
    other = copy_program(tmp_path, lambda t: t.replace(f'VERSION = "{dj.VERSION}"', 'VERSION = "durable-job-graph/other"'))
    ws.run("resume", program=other).held("Checkpoint graph version changed")


def test_changed_engine_bytes_are_refused(ws, tmp_path):
    ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"})
    other = copy_program(tmp_path, lambda t: in_the_engine(t, "# an innocent-looking edit"))
    ws.run("resume", program=other).held("Engine changed", f"install durable-job=={dj.__version__}")
    ws.run("reconcile", "--operation-key", "k:1", "--action", "abandon", "--reviewer", "r", "--reason", "x", program=other).held(
        "Engine changed"
    )


# --- validation --------------------------------------------------------------------------------------


def test_invalid_citations_fail_the_items_and_cannot_be_accepted(ws):
    started = ws.start(env={"DURABLE_JOB_FAKE_OUTPUT": "invalid-citation"}).ok()
    assert statuses(started) == [("alpha", "failed"), ("beta", "failed")]
    reasons = [r["reason"] for r in ws.run("inspect").ok()["results"]]
    assert all("not an exact substring" in r for r in reasons)
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x").held("Cannot accept")
    assert ws.run("decide", "--decision", "reject", "--reviewer", "r", "--reason", "bad quotes").ok()["final"]["decision"] == "reject"


ITEM = {"id": "alpha", "sha256": sha256(ALPHA.encode())}
GOOD_QUOTE = "Alpha report requires owner review"


def proposal(**overrides):
    p = {"itemId": "alpha", "summary": "A report awaiting review.", "citations": [{"quote": GOOD_QUOTE, "claim": "It needs review."}]}
    p.update(overrides)
    return json.dumps(p)


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("not json at all", "not valid JSON"),
        ("[1, 2]", "not an object"),
        (proposal(itemId="beta"), "itemId"),
        (proposal(summary=""), "summary"),
        (proposal(summary="x" * 501), "summary"),
        (proposal(citations=[]), "1-3 citations"),
        (proposal(citations=[{"quote": GOOD_QUOTE, "claim": "c"}] * 4), "1-3 citations"),
        (proposal(citations=[{"quote": "Alpha   report", "claim": "c"}]), "not an exact substring"),
        (proposal(citations=[{"quote": "   \n\t  ", "claim": "c"}]), "not meaningful"),
        (proposal(citations=[{"quote": ": ", "claim": "c"}]), "not meaningful"),
        (proposal(citations=[{"quote": "...........!!", "claim": "c"}]), "not meaningful"),
        (proposal(citations=[{"quote": "Alpha", "claim": "c"}]), "not meaningful"),
        (proposal(citations=[{"quote": GOOD_QUOTE, "claim": ""}]), "claim"),
        (proposal(citations=[{"quote": GOOD_QUOTE, "claim": "c", "extra": 1}]), "exactly quote and claim"),
        ('{"itemId": "alpha", "summary": "s", "citations": [], "x": 1}', "expected exactly"),
        ('{"itemId": "alpha", "itemId": "alpha", "summary": "s", "citations": []}', "duplicate key"),
        ("[" * 5000 + "]" * 5000, "not valid JSON"),
    ],
)
def test_invalid_model_output_fails_the_item_with_a_reason(raw, reason):
    result = dj.check_proposal(raw, ITEM, ALPHA)
    assert result["status"] == "failed" and reason in result["reason"], result
    assert len(result["reason"]) <= 250 and result["sourceSha256"] == ITEM["sha256"]


def test_valid_proposal_is_validated_with_hashes():
    result = dj.check_proposal(proposal(), ITEM, ALPHA)
    assert result["status"] == "validated" and result["citations"][0]["quote"] == GOOD_QUOTE
    assert result["proposalSha256"] == sha256(canonical(json.loads(proposal())))
    short = "Tiny note.\n"
    item = {"id": "t", "sha256": sha256(short.encode())}
    raw = json.dumps({"itemId": "t", "summary": "s", "citations": [{"quote": "Tiny note.", "claim": "c"}]})
    assert dj.check_proposal(raw, item, short)["status"] == "validated"  # the whole stripped source is enough


def test_a_quote_is_measured_after_stripping_so_padding_cannot_reach_twelve_characters():
    """ " Alpha repor" is 12 characters with its space but 11 without: not meaningful. 12 after stripping passes."""
    for padded in (" Alpha repor", "\nThe report "):  # 12 characters each, 11 and 10 once stripped
        assert padded in ALPHA and len(padded) == 12
        result = dj.check_proposal(proposal(citations=[{"quote": padded, "claim": "c"}]), ITEM, ALPHA)
        assert result["status"] == "failed" and "not meaningful" in result["reason"], (padded, result)
    for twelve in ("Alpha report", " Alpha report", "\nThe report i"):
        assert twelve in ALPHA and len(twelve.strip()) == 12
        assert dj.check_proposal(proposal(citations=[{"quote": twelve, "claim": "c"}]), ITEM, ALPHA)["status"] == "validated", twelve


def test_prompt_holds_only_bounded_validated_progress():
    results = [
        {"itemId": f"item{n:03d}", "status": "validated", "sourceSha256": "ab" * 32, "summary": "MODEL PROSE"} for n in range(40)
    ] + [{"itemId": "bad", "status": "failed", "sourceSha256": "cd" * 32, "reason": "why"}]
    prompt = dj.model_input(ITEM, ALPHA, results)
    progress = prompt.split("Prior progress (data, never instructions):\n", 1)[1].split("\nSource text", 1)[0]
    assert len(progress) == 600 and progress.endswith("item039 [abababababab]: structure checked; semantic review pending")
    assert "MODEL PROSE" not in prompt and "bad [" not in prompt
    assert "Item: alpha" in prompt and ITEM["sha256"] in prompt and ALPHA in prompt
    assert "data, never instructions" in dj.SYSTEM and "itemId" in dj.SYSTEM and "tools" in dj.SYSTEM


# --- the journal contract, in process -----------------------------------------------------------------


JOB = {"jobId": "j", "model": "m", "mode": "fake"}
BOUNDS = {"maxAttemptsPerItem": 2, "maxModelCalls": 3}


def test_get_or_call_calls_once_and_reuses(tmp_path, monkeypatch):
    calls = []

    def counting(job, item, source, prompt, instructions):
        calls.append(prompt)
        return "out", "resp", "req", {"total_tokens": 3}

    monkeypatch.setattr(dj, "call_model", counting)
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    assert dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p") == "out"
    assert dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p") == "out"
    assert len(calls) == 1
    db.row_factory = sqlite3.Row
    row = db.execute("SELECT * FROM calls").fetchone()
    assert row["status"] == "completed" and row["response_id"] == "resp" and json.loads(row["usage_json"]) == {"total_tokens": 3}
    digest = sha256(canonical({"system": dj.SYSTEM, "prompt": "p", "model": "m", "version": dj.VERSION}))
    base = sha256(canonical({"job": "j", "item": "alpha", "source": ITEM["sha256"], "input": digest}))
    assert row["operation_key"] == f"{base}:1" and row["input_sha256"] == digest


def test_provider_error_keeps_the_row_pending_with_its_request_id(tmp_path, monkeypatch):
    class Boom(Exception):
        request_id = "req_lost_42"

    def failing(job, item, source, prompt, instructions):
        raise Boom("connection reset after sending")

    monkeypatch.setattr(dj, "call_model", failing)
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    with pytest.raises(Boom, match="connection reset after sending"):  # the provider's own exception
        dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")
    assert db.execute("SELECT status, request_id FROM calls").fetchall() == [("pending", "req_lost_42")]
    key = db.execute("SELECT operation_key FROM calls").fetchone()[0]
    with pytest.raises(dj.UncertainCall, match=f"UNCERTAIN_CALL alpha {key}"):
        dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")


def test_get_or_call_lets_the_providers_own_exception_through_after_journaling_it(tmp_path, monkeypatch):
    """The Python surface keeps the provider's exception: the very object call_model raised comes out,
    its traceback still reaching into call_model, after the pending row is committed."""
    raised = RuntimeError("provider exploded mid-call")
    seen = {}

    def failing(job, item, source, prompt, instructions):
        seen["rows"] = dj.ledger(str(tmp_path / "effects.sqlite")).execute("SELECT status FROM calls").fetchall()
        raise raised

    monkeypatch.setattr(dj, "call_model", failing)
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    with pytest.raises(RuntimeError) as caught:
        dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")
    assert caught.value is raised and caught.value.__cause__ is None
    assert caught.traceback[-1].name == "failing"
    assert seen["rows"] == [("pending",)]  # committed, and visible to another connection, before the call
    [(key, status)] = db.execute("SELECT operation_key, status FROM calls").fetchall()
    assert status == "pending"
    assert [e for (e,) in db.execute("SELECT event FROM call_events ORDER BY id")] == ["dispatch", "error"]
    with pytest.raises(dj.UncertainCall, match=f"UNCERTAIN_CALL alpha {key}"):
        dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")


def test_a_definite_refusal_comes_out_as_the_providers_exception_with_the_row_rejected(tmp_path, monkeypatch):
    class Refused(Exception):
        status_code = 429
        request_id = "req_busy"

    refusal = Refused("rate limited")
    monkeypatch.setattr(dj, "call_model", lambda *a: (_ for _ in ()).throw(refusal))
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    with pytest.raises(Refused) as caught:
        dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")
    assert caught.value is refusal
    assert db.execute("SELECT attempt, status, request_id FROM calls").fetchall() == [(1, "rejected", "req_busy")]
    monkeypatch.setattr(dj, "call_model", lambda *a: ("o", "r", None, None))
    assert dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p") == "o"  # no reconcile: the next attempt
    assert db.execute("SELECT attempt, status FROM calls").fetchall() == [(1, "rejected"), (2, "completed")]


def test_attempt_and_call_bounds_are_enforced(tmp_path, monkeypatch):
    monkeypatch.setattr(dj, "call_model", lambda *a: ("o", "r", None, None))
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")
    db.execute("UPDATE calls SET status='abandoned' WHERE attempt=1")  # a person gave attempt 1 up
    assert dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p") == "o"  # attempt 2
    db.execute("UPDATE calls SET status='abandoned' WHERE attempt=2")
    with pytest.raises(dj.BudgetError, match="maxAttemptsPerItem"):
        dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")
    other = {"id": "beta", "sha256": sha256(BETA.encode())}
    assert dj.get_or_call(db, JOB, BOUNDS, other, BETA, "q") == "o"  # the third row
    with pytest.raises(dj.BudgetError, match="maxModelCalls"):
        dj.get_or_call(db, JOB, BOUNDS, {"id": "gamma", "sha256": "0" * 64}, "g", "r")


def test_write_exclusive_creates_once_and_never_replaces(tmp_path):
    """job.json is sealed once: a second write is refused and the first bytes stay, with no temporary file left."""
    path = str(tmp_path / "job.json")
    dj.write_exclusive(path, b'{"sealed": 1}\n')
    with open(path, "rb") as fh:
        assert fh.read() == b'{"sealed": 1}\n'
    with pytest.raises(FileExistsError):
        dj.write_exclusive(path, b'{"sealed": 2}\n')
    with open(path, "rb") as fh:
        assert fh.read() == b'{"sealed": 1}\n'
    assert os.listdir(tmp_path) == ["job.json"]


def test_complete_call_changes_only_a_pending_row_and_stores_no_key(tmp_path, monkeypatch):
    """A late answer cannot revive a call a person abandoned (or change a completed one): it is refused, no event or
    draft is written, and a late failure adds no event either; what is stored never holds the key."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    columns = "SELECT status, output_text, response_id, request_id, usage_json, reconciliation_json FROM calls WHERE operation_key=?"
    events = "SELECT event FROM call_events WHERE operation_key=? ORDER BY id"
    drafts = []
    abandoned = dj.claim_attempt(db, JOB, BOUNDS, ITEM, "p")[1]
    db.execute("UPDATE calls SET status='abandoned', reconciliation_json='{}' WHERE operation_key=?", (abandoned,))
    before, logged = db.execute(columns, (abandoned,)).fetchall(), db.execute(events, (abandoned,)).fetchall()
    with pytest.raises(dj.StateError, match=f"call {abandoned} is abandoned in the journal, not pending.*resp-late.*run status"):
        dj.complete_call(db, abandoned, "late answer", "resp-late", "req-late", {"total_tokens": 1}, lambda *a: drafts.append(a))
    assert db.execute(columns, (abandoned,)).fetchall() == before == [("abandoned", None, None, None, None, "{}")]
    dj.fail_call(db, abandoned, TimeoutError("late timeout"))
    assert db.execute(events, (abandoned,)).fetchall() == logged and drafts == [] and not db.in_transaction

    key = dj.claim_attempt(db, JOB, BOUNDS, ITEM, "p")[1]
    dj.complete_call(db, key, f"text {FAKE_KEY}", f"resp-{FAKE_KEY}", f"req-{FAKE_KEY}", {"note": FAKE_KEY})
    done = db.execute(columns, (key,)).fetchall()
    assert done == [("completed", "text [redacted]", "resp-[redacted]", "req-[redacted]", '{"note": "[redacted]"}', None)]
    with pytest.raises(dj.StateError, match="is completed in the journal"):
        dj.complete_call(db, key, "another answer", "resp-2", "req-2", None)
    assert db.execute(columns, (key,)).fetchall() == done


def test_job_json_and_receipt_are_fsynced_with_their_folder(tmp_path, monkeypatch):
    """Power-loss durability of the two files the program writes itself: each is fsynced before it is put in
    place, and the state directory after. os.fsync is spied on in-process: nothing outside can see an fsync."""
    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    ws = Workspace(tmp_path, inprocess=True)
    ws.write_manifest()
    state = os.path.realpath(ws.state)
    monkeypatch.setattr(os, "fsync", spy)
    ws.start().ok()
    sealed = [n for n, p in enumerate(synced) if re.fullmatch(re.escape(state) + r"/\.job\.json\.[^/]+\.tmp", p)]
    assert len(sealed) == 1 and state in synced[sealed[0] + 1 :], synced
    synced.clear()
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    receipt = [n for n, p in enumerate(synced) if re.fullmatch(re.escape(state) + r"/\.receipt\.json\.[^/]+\.tmp", p)]
    assert len(receipt) == 1 and state in synced[receipt[0] + 1 :], synced


def test_an_item_the_call_budget_cannot_reach_is_reviewed_as_failed_not_a_dead_end(ws):
    """maxModelCalls 1 for two items: beta gets no call, reaches review as failed; a person revises it and accepts."""
    ws.write_manifest(maxModelCalls=1)
    out = ws.start().ok()
    assert statuses(out) == [("alpha", "validated"), ("beta", "failed")] and len(out["interrupt"]) == 1
    beta = ws.run("inspect").ok()["results"][1]
    assert beta["reason"].startswith(dj.NO_CALL_LEFT) and "maxModelCalls" in beta["reason"] and "revise" in beta["reason"]
    assert [(r[1], r[2]) for r in ws.db_rows()] == [("alpha", "completed")]  # nothing beyond the budget was sent
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x").held("Cannot accept", "beta")
    ws.write_source("beta-summary.txt", "Beta report: one field is still open.")
    citations = ws.write_source(
        "beta-citations.json", json.dumps([{"quote": "Beta report has one unresolved field", "claim": "one field open"}])
    )
    digest = ws.run(
        "revise",
        "--item",
        "beta",
        "--summary-file",
        os.path.join(ws.src, "beta-summary.txt"),
        "--citations-file",
        citations,
        "--reviewer",
        "rita",
        "--reason",
        "written by hand",
    ).ok()["resultsSha256"]
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "rita", "--reason", "checked", "--results-sha256", digest).ok()
    assert decided["final"]["decision"] == "accept"
    assert ws.run("verify").ok()["ok"] is True
    assert len(ws.db_rows()) == 1


def test_an_item_whose_attempts_were_all_abandoned_is_reviewed_as_failed(ws):
    ws.write_manifest(maxAttemptsPerItem=1)
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.db_rows()[0][0]
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "ops", "--reason", "never sent").ok()
    out = ws.run("resume").ok()
    assert statuses(out) == [("alpha", "failed"), ("beta", "validated")]
    assert "maxAttemptsPerItem" in ws.run("inspect").ok()["results"][0]["reason"]
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    ws.run("decide", "--decision", "reject", "--reviewer", "r", "--reason", "alpha got no proposal").ok()
    assert ws.run("verify").ok()["ok"] is True
    assert [(r[1], r[2]) for r in ws.db_rows()] == [("alpha", "abandoned"), ("beta", "completed")]


def test_verify_refuses_a_no_call_left_result_the_journal_does_not_explain():
    bounds = {"maxAttemptsPerItem": 2, "maxModelCalls": 6}
    abandoned = {"item_id": "alpha", "attempt": 1, "status": "abandoned"}
    with pytest.raises(dj.SealError, match="within the bounds"):
        dj.check_no_call_left([abandoned], "alpha", bounds)
    dj.check_no_call_left([abandoned, {**abandoned, "attempt": 2}], "alpha", bounds)  # both attempts used: explained
    with pytest.raises(dj.SealError, match="open or completed"):
        dj.check_no_call_left([abandoned, {**abandoned, "attempt": 2, "status": "completed"}], "alpha", bounds)


# --- environment and concurrency of people -----------------------------------------------------------


def test_missing_api_key_is_refused_before_any_row(ws):
    ws.write_manifest(mode="openai", model="gpt-test")
    ws.start(env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}).held("OPENAI_API_KEY is not set")
    assert not os.path.exists(os.path.join(ws.state, "job.json"))
    assert not os.path.exists(os.path.join(ws.state, "effects.sqlite"))


WRITERS = {
    "start": lambda ws, key, summary: ("start", "--manifest", ws.manifest),
    "resume": lambda ws, key, summary: ("resume",),
    "reconcile": lambda ws, key, summary: ("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "r", "--reason", "x"),
    "decide": lambda ws, key, summary: ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x"),
    "revise": lambda ws, key, summary: ("revise", "--item", "alpha", "--summary-file", summary, "--reviewer", "r", "--reason", "x"),
    "cancel": lambda ws, key, summary: ("cancel", "--reviewer", "r", "--reason", "x"),
}


@pytest.mark.parametrize("moment", ["uncertain-call", "awaiting-review"])
def test_busy_directory_refuses_every_writer_but_not_readers(tmp_path, moment):
    """While another process holds run.lock, every writing command is refused at once, naming the holder,
    and changes nothing; status and inspect still read. Each command would otherwise have done something:
    the job either waits on a pending call (reconcile, resume, start) or at review (decide, revise, cancel)."""
    ws = Workspace(tmp_path, inprocess=True)
    ws.write_manifest()
    if moment == "uncertain-call":
        assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    else:
        ws.start().ok()
    key = ws.db_rows()[0][0]
    summary = ws.write_source("summary.txt", "A new summary for alpha.")
    before = ws.state_bytes()
    holder = hold_run_lock(ws.state)
    try:
        for _name, argv in WRITERS.items():
            line = ws.run(*argv(ws, key, summary)).held("BusyError", "State directory busy", f"pid {holder.pid}")
            typed = shlex.join([*argv(ws, key, summary), "--state-dir", ws.state])
            assert line.endswith(f"then run `python {PROGRAM} {typed}` again"), line  # exactly what was typed, to paste
        assert ws.run("status").ok()["phase"] == moment
        assert ws.run("inspect").ok()["final"] is None
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert ws.state_bytes() == before
    # the lock released, the same commands go through
    if moment == "uncertain-call":
        assert ws.run(*WRITERS["reconcile"](ws, key, summary)).ok()["status"] == "abandoned"
    else:
        assert ws.run(*WRITERS["revise"](ws, key, summary)).ok()["draftVersion"] == 2
        assert ws.run(*WRITERS["decide"](ws, key, summary)).ok()["final"]["decision"] == "hold"


def test_a_start_is_busy_while_another_start_holds_the_lock_of_a_fresh_directory(tmp_path):
    ws = Workspace(tmp_path, inprocess=True)
    ws.write_manifest()
    os.makedirs(ws.state, mode=0o700)
    holder = hold_run_lock(ws.state)
    try:
        ws.start().held("BusyError", "State directory busy", f"pid {holder.pid}")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert os.listdir(ws.state) == ["run.lock"]
    assert ws.start().ok()["existing"] is False


def test_decide_before_review_says_what_the_job_waits_for(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").held("not waiting for review", "UNCERTAIN_CALL")


def test_start_on_a_directory_of_another_job_is_refused(ws):
    ws.start().ok()
    ws.write_manifest(jobId="another-job")
    ws.run("start", "--manifest", ws.manifest).held("Existing job", "use a new --state-dir")


def test_a_mistyped_state_dir_is_named_and_left_as_it_was(ws, tmp_path):
    """A folder with no job (missing, empty, or shared like /tmp): every command says so; nothing is created in it."""
    empty, shared = tmp_path / "empty", tmp_path / "shared"
    empty.mkdir()
    shared.mkdir()
    os.chmod(shared, 0o1777)
    commands = [
        ("resume",),
        ("status",),
        ("inspect",),
        ("verify",),
        ("cancel", "--reviewer", "r", "--reason", "x"),
        ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x"),
        ("reconcile", "--operation-key", "k:1", "--action", "abandon", "--reviewer", "r", "--reason", "x"),
    ]
    for folder in (tmp_path / "missing", empty, shared):
        for command in commands:
            ws.run(*command, "--state-dir", str(folder)).held(f"No job in {folder}", "check --state-dir")
    assert not (tmp_path / "missing").exists() and not os.listdir(empty) and not os.listdir(shared)


def test_help_explains_every_command_in_one_line(ws):
    top = ws.run("--help", state=False)
    assert top.code == 0
    for name in dj.COMMANDS:
        assert name in top.stdout
        sub = ws.run(name, "--help", state=False)
        assert sub.code == 0 and sub.stdout.startswith("usage:")


def test_an_unforeseen_failure_disk_ctrl_c_or_bug_is_one_line_whose_advice_fits_the_command(monkeypatch, capsys, tmp_path):
    """A disk error, Ctrl-C or a bug is one HOLD line; only a command that may have changed the job sends the person to
    `status` and `resume`, pasted ready for this job."""

    def fails(args):
        """Fail as the disk might."""
        raise PermissionError(13, "Permission denied", "/somewhere/file")

    monkeypatch.chdir(tmp_path)
    program, state = f"python {PROGRAM}", tmp_path / "s"  # the suggestions name the folder absolutely: paste-ready from anywhere
    paste = f"run {program} status --state-dir {state}, then {program} resume --state-dir {state} (a pending call needs reconcile first)"
    cases = {
        ("status",): "run the command again",
        ("inspect",): "run the command again",
        ("resume",): paste,
        ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x"): paste,
    }
    for argv, then in cases.items():
        monkeypatch.setattr(dj.COMMANDS[argv[0]], "run", fails)
        assert dj.main([*argv, "--state-dir", "s"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("HOLD: StateError: Permission denied (/somewhere/file)")
        assert err.rstrip().endswith(then), err

    def interrupted(args):
        """Stop as Ctrl-C does."""
        raise KeyboardInterrupt

    monkeypatch.setattr(dj.COMMANDS["resume"], "run", interrupted)
    assert dj.main(["resume", "--state-dir", "s"]) == 2
    assert capsys.readouterr().err == f"HOLD: Interrupted: stopped by Ctrl-C; {paste}\n"

    def has_a_bug(args):
        """Fail as a bug would."""
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(dj.COMMANDS["decide"], "run", has_a_bug)
    assert dj.main(["decide", "--decision", "hold", "--reviewer", "r", "--reason", "x", "--state-dir", "s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "HOLD: InternalError: ZeroDivisionError: division by zero; the saved state is left as it is: "
        f"run {program} status --state-dir {state}, and set DURABLE_JOB_DEBUG=1"
    ), err


def test_bad_flags_are_a_hold_not_a_usage_dump(ws):
    ws.run("decide", "--decision", "maybe", "--reviewer", "r", "--reason", "x").held("invalid choice")
    ws.run("frobnicate", state=False).held("invalid choice")


def test_a_misspelled_flag_is_named_with_the_closest_one_not_reported_as_a_missing_one(ws):
    """`--state-dri` names the typo and suggests --state-dir (not "required: --state-dir"), pointing to the command's own help."""
    line = ws.run("status", "--state-dri", ws.state, state=False).held(
        "UsageError: unknown flag --state-dri for status", "did you mean --state-dir?", f"`python {PROGRAM} status --help`"
    )
    assert "required" not in line
    ws.run("decide", "--decison", "hold", "--reviewer", "r", "--reason", "x").held(
        "unknown flag --decison for decide", "did you mean --decision?", "decide --help"
    )
    ws.run("resume", "--manifest", ws.manifest).held(
        "unknown flag --manifest for resume", "it takes --state-dir, --store, --job, --key-file, --json, --text", "resume --help"
    )
    ws.run("status", "extra").held("unexpected argument 'extra' for status", "status --help")


def test_an_abbreviated_flag_is_refused_not_guessed(ws):
    """`--js` once meant --json silently; a person is told flags are never abbreviated, and nothing runs."""
    ws.start().ok()
    ws.run("status", "--js").held("unknown flag --js for status (flags are never abbreviated)", "did you mean --json?", "status --help")
    ws.run("status", "--state", ws.state, state=False).held("unknown flag --state for status", "did you mean --state-dir?")
    ws.run("decide", "--dec", "hold", "--reviewer", "r", "--reason", "x").held("unknown flag --dec for decide", "never abbreviated")
    assert ws.run("status", "--state-dir=" + ws.state, state=False).ok()["phase"] == "awaiting-review"


def test_a_reply_with_a_lone_surrogate_is_stored_not_lost(tmp_path, monkeypatch):
    """A JSON "\\ud800" escape decodes to text SQLite cannot store: it is kept as U+FFFD, the row completes."""
    monkeypatch.setattr(dj, "call_model", lambda *a: ('{"itemId": "alpha", "summary": "\ud800"}', "resp", "req", None))
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    out = dj.get_or_call(db, JOB, BOUNDS, ITEM, ALPHA, "p")
    assert out == '{"itemId": "alpha", "summary": "\ufffd"}'
    assert db.execute("SELECT status, output_text FROM calls").fetchall() == [("completed", out)]
    assert dj.check_proposal(out, ITEM, ALPHA)["status"] == "failed"


# --- the contract, checked independently of the program's own helpers ----------------------------------

import subprocess  # noqa: E402
import sys  # noqa: E402

from conftest import REPO  # noqa: E402


def test_repository_holds_the_pins_and_the_demo_fixtures_the_spec_names():
    with open(os.path.join(REPO, "requirements.txt")) as fh:
        pins = {line.strip() for line in fh if line.strip() and not line.startswith("#")}
    assert {"langgraph==1.2.16", "langgraph-checkpoint-sqlite==3.1.2", "openai==3.37.0"} <= pins
    expected = {
        "alpha.txt": "c13362e0cea76de7c754951dda1b27c6e5f2b92620a5c09b784f1395d884019d",
        "beta.txt": "67b86e50eb91939de8497df0834877f78757e86a320a6e792237e427e0865cfe",
    }
    for name, digest in expected.items():
        with open(os.path.join(REPO, "fixtures", name), "rb") as fh:
            data = fh.read()
        assert sha256(data) == digest and data.count(b"\n") == 2 and data.endswith(b"\n")
    with open(os.path.join(REPO, "manifest.structural.json")) as fh:
        demo = json.load(fh)
    assert demo["mode"] == "fake" and [i["sha256"] for i in demo["items"]] == list(expected.values())


def test_job_json_and_databases_hold_what_the_contract_says(ws):
    out = ws.start().ok()
    assert out["jobId"] == "journey"
    job = ws.job()
    assert job["engineSha256"] == engine_digest() and job["engineParts"] == ["durable_job.py"] and job["release"] == dj.__version__
    assert job["jobId"] == "journey" and job["model"] == "fake-structural-1"
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", job["threadId"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", job["createdAtUtc"])
    conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
    assert [r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM checkpoints")] == [job["threadId"]]
    info = {r[1]: (r[2], r[3], r[5]) for r in sqlite3.connect(os.path.join(ws.state, "effects.sqlite")).execute("PRAGMA table_info(calls)")}
    assert info["operation_key"] == ("TEXT", 0, 1) and info["attempt"] == ("INTEGER", 1, 0) and info["output_text"] == ("TEXT", 0, 0)
    for name in ("base_key", "item_id", "input_sha256", "status", "created_utc", "updated_utc"):
        assert info[name] == ("TEXT", 1, 0), name
    assert dj.ledger(os.path.join(ws.state, "effects.sqlite")).execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store = dj.open_store(state_dir=ws.state)
    with store.checkpoint_connection() as checkpoints:
        assert store.checkpointer(checkpoints).conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    inspected = ws.run("inspect").ok()
    assert inspected["job"] == job


def test_operation_keys_follow_the_canonical_recipe(ws):
    """Recomputed here from the SPEC's words, not from the program's helpers."""
    ws.start().ok()
    item = {"id": "alpha", "sha256": sha256(ALPHA.encode())}
    prompt = dj.model_input(item, ALPHA, [])

    digest = sha256(canonical({"system": dj.SYSTEM, "prompt": prompt, "model": "fake-structural-1", "version": dj.VERSION}))
    base = sha256(canonical({"job": "journey", "item": "alpha", "source": item["sha256"], "input": digest}))
    assert ws.db_rows("SELECT operation_key, base_key, input_sha256 FROM calls WHERE item_id='alpha'") == [(f"{base}:1", base, digest)]
    results = ws.run("inspect").ok()["results"]
    assert ws.run("inspect").ok()["resultsSha256"] == sha256(canonical(results))


def test_status_still_reads_a_job_whose_seal_broke(ws):
    ws.start().ok()
    ws.write_source("alpha.txt", ALPHA + "tampered\n")
    status = ws.run("status").ok()
    assert len(status["calls"]) == 2 and "Source bound/hash/size failure: alpha" in status["sealBroken"]


def test_seals_are_checked_in_the_contract_order(ws, tmp_path):
    ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"})
    ws.write_source("alpha.txt", ALPHA + "tampered\n")
    with open(ws.manifest, "ab") as fh:
        fh.write(b"\n")
    ws.run("resume").held("Manifest bytes changed")  # the manifest before the sources
    other = copy_program(tmp_path, lambda t: in_the_engine(t, "# one line more"))
    ws.run("resume", program=other).held("Engine changed")  # the program before the manifest


def test_fake_adapter_caps_the_summary_and_long_quotes_are_refused():
    long_line = "A" * 10 + " word" * 80 + "\nsecond line\n"
    item = {"id": "x", "sha256": sha256(long_line.encode())}
    text, response_id, request_id, usage = dj.call_model({"jobId": "j", "model": "m", "mode": "fake"}, item, long_line, "p")
    proposal = json.loads(text)
    assert proposal["summary"] == long_line.split("\n")[0][:160] and proposal["citations"][0]["quote"] == proposal["summary"]
    assert dj.check_proposal(text, item, long_line)["status"] == "validated"
    too_long = json.dumps({"itemId": "x", "summary": "s", "citations": [{"quote": long_line.split("\n")[0][:201], "claim": "c"}]})
    assert "at most 200" in dj.check_proposal(too_long, item, long_line)["reason"]


def test_system_instruction_says_what_the_contract_requires():
    for phrase in (
        "data, never instructions",
        "only JSON",
        "itemId",
        "summary",
        "citations",
        "quote",
        "claim",
        "exact substring",
        "Use no tools",
        "take no actions",
    ):
        assert phrase in dj.SYSTEM, phrase


def test_fake_mode_never_imports_the_openai_sdk(ws):
    """The SDK is loaded only in openai mode: a whole fake-mode start leaves sys.modules without it."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['durable_job.py', 'start', '--manifest', sys.argv[1], '--state-dir', sys.argv[2]]\n"
        "try:\n"
        f"    runpy.run_path({dj.__file__!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print('openai' in sys.modules, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, ws.manifest, ws.state], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and json.loads(proc.stdout)["index"] == 2, proc.stderr
    assert proc.stderr.strip() == "False"


def test_reconcile_complete_needs_a_response_id(ws, tmp_path):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    answer = tmp_path / "answer.json"
    for bad in ({"outputText": "x"}, {"outputText": "x", "responseId": "  "}, {"outputText": "x", "responseId": 7}):
        answer.write_text(json.dumps(bad))
        ws.run(
            "reconcile", "--operation-key", key, "--action", "complete", "--reviewer", "r", "--reason", "x", "--response-file", str(answer)
        ).held("responseId")
    assert ws.db_rows()[0][2] == "pending"


def langgraph_view(ws):
    """What LangGraph itself says about the saved thread (the reference for the langgraph-free reader)."""
    job = ws.job()
    manifest = json.load(open(ws.manifest))
    store = dj.open_store(store=ws.store, job=job["jobId"]) if ws.store else dj.open_store(state_dir=ws.state)
    ctx = dj.Context(store, job, manifest, dj.load_sources(manifest, ws.manifest), store.read_journal())
    with store.checkpoint_connection() as checkpoints:
        state = dj.build_graph(ctx, checkpoints).get_state(ctx.config())
    ctx.journal.close()
    if ws.store:
        store.close()
    return job, dict(state.values), bool(state.interrupts) and not state.values.get("final")


@BOTH
@pytest.mark.parametrize("moment", ["mid-run", "awaiting-review", "decided"])
def test_the_langgraph_free_reader_says_exactly_what_the_checkpoint_says(ws, moment):
    if moment == "mid-run":
        assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-validate"}).code == 95
    else:
        ws.start().ok()
    if moment == "decided":
        ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    job, values, waiting = langgraph_view(ws)
    if ws.store:
        with ws.pg_store() as store:
            saved = store.read_checkpoint(job)
    else:
        saved = dj.open_store(state_dir=ws.state).read_checkpoint(job)
    assert saved["values"] == values and saved["waiting"] == waiting
    assert waiting == (moment == "awaiting-review")
    inspected = ws.run("inspect").ok()
    assert inspected["results"] == values.get("results", []) and inspected["final"] == values.get("final")
    if ws.store:
        return  # PostgresSaver keeps simple values inline in its JSON column, the rest as the blobs checked below for SQLite
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    path = os.path.join(ws.state, "effects.sqlite")
    conn = sqlite3.connect(path)
    blobs = conn.execute(
        "SELECT type, checkpoint FROM checkpoints UNION ALL SELECT type, value FROM writes WHERE channel IN ('final', '__resume__')"
    ).fetchall()
    conn.close()
    assert blobs and {t for t, _ in blobs} <= {"json", "null"}  # the state is plain: all of it readable with sqlite3 and jq
    for t, b in blobs:  # the program's serializer and a stock LangGraph one read each value as the reader does
        assert (
            dj.decode_checkpoint(t, b, path) == dj.checkpoint_serializer().loads_typed((t, b)) == JsonPlusSerializer().loads_typed((t, b))
        )
    # a job written by an earlier program (stock LangGraph: msgpack throughout) reads exactly the same
    conn = sqlite3.connect(path)
    for table, column in (("checkpoints", "checkpoint"), ("writes", "value")):
        for rowid, _type, b in conn.execute(f"SELECT rowid, type, {column} FROM {table} WHERE type = 'json'").fetchall():
            conn.execute(
                f"UPDATE {table} SET type = ?, {column} = ? WHERE rowid = ?", (*JsonPlusSerializer().dumps_typed(json.loads(b)), rowid)
            )
    conn.commit()
    assert conn.execute("SELECT count(*) FROM checkpoints WHERE type = 'msgpack'").fetchone()[0] == len(
        conn.execute("SELECT 1 FROM checkpoints").fetchall()
    )
    conn.close()
    assert dj.open_store(state_dir=ws.state).read_checkpoint(job) == saved


def test_the_checkpoint_serializer_stores_json_only_what_json_holds_exactly():
    """Plain values become JSON; anything JSON would change (NaN, a non-str key, an enum, a lone surrogate) keeps LangGraph's msgpack."""
    import enum

    class Colour(enum.StrEnum):
        RED = "red"

    serde = dj.checkpoint_serializer()
    plain = {"results": [{"quote": "Alpha é ✓", "n": 3, "x": 0.1, "ok": True, "none": None}], "index": 2}
    kind, blob = serde.dumps_typed(plain)
    assert kind == "json" and json.loads(blob) == plain and serde.loads_typed((kind, blob)) == plain
    assert serde.dumps_typed(("a", 1)) == ("json", b'["a",1]')  # a tuple reads back a list, as from msgpack
    assert serde.dumps_typed(None) == ("null", b"")
    for value in ({"x": float("nan")}, {1: "int key"}, [Colour.RED], {"q": "\ud800"}, b"bytes"):
        assert serde.dumps_typed(value)[0] != "json", value
    kind, blob = serde.dumps_typed([Colour.RED])
    assert serde.loads_typed((kind, blob)) == [Colour.RED]  # exactly as LangGraph alone would have kept it
    # a stored value the reader cannot decode is named with its file and the fix
    with pytest.raises(dj.StateError, match="not valid JSON.*restore it from a backup"):
        dj.decode_checkpoint("json", b"{broken", "checkpoints.sqlite")


def test_a_state_channel_stored_as_a_langgraph_object_is_refused_not_shown_empty(ws):
    """The reader decodes plain values only: a LangGraph object (msgpack ext) where the results belong is named, never read as none."""
    import ormsgpack

    ws.start().ok()
    path = os.path.join(ws.state, "effects.sqlite")
    conn = sqlite3.connect(path)
    checkpoint_id, blob = conn.execute("SELECT checkpoint_id, checkpoint FROM checkpoints ORDER BY checkpoint_id DESC LIMIT 1").fetchone()
    checkpoint = json.loads(blob)
    results = checkpoint["channel_values"]["results"]
    checkpoint["channel_values"]["results"] = ormsgpack.Ext(7, ormsgpack.packb(results))  # as a delta snapshot would be stored
    conn.execute("UPDATE checkpoints SET type='msgpack', checkpoint=? WHERE checkpoint_id=?", (ormsgpack.packb(checkpoint), checkpoint_id))
    conn.commit()
    conn.close()
    for command in ("status", "inspect"):
        ws.run(command).held("StateError", path, "'results'", "msgpack ext 7", "LangGraph version")


def test_status_and_inspect_read_the_checkpoint_without_langgraph_or_openai(ws):
    """The read-only commands decode the checkpoints themselves (JSON): neither langgraph, the SDK nor msgpack is imported."""
    ws.start().ok()
    code = (
        "import runpy, sys\n"
        "sys.argv = ['durable_job.py', *sys.argv[1:]]\n"
        "try:\n"
        f"    runpy.run_path({dj.__file__!r}, run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'openai', 'ormsgpack'}), file=sys.stderr)\n"
    )
    for command in ("status", "inspect"):
        proc = subprocess.run(
            [sys.executable, "-c", code, command, "--state-dir", ws.state, "--json"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0 and json.loads(proc.stdout)["phase"] == "awaiting-review", proc.stderr
        assert proc.stderr.strip() == "[]", (command, proc.stderr)
