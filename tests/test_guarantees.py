"""One test (or a few) per guarantee the contract page states, each written to fail when that guarantee breaks.

`make mutate` proves it: every mutant in mutate/mutants.py is a small bug in one guarantee's code, and
the guarantee's test here must notice it. The order follows the contract: the journal and its
statuses, the operation-key recipe, the bounds, validation, seals, reconcile, calls never sent,
locks, decisions, the receipt and verify, a store's jobs kept apart, the worker, retry.
"""

import json
import os
import sqlite3

import pytest

import durable_job as dj
from conftest import (
    ALPHA,
    BETA,
    BOTH,
    FAKE_KEY,
    GAMMA,
    PROGRAM,
    Workspace,
    admin_url,
    canonical,
    copy_program,
    free_port,
    in_the_engine,
    openai_workspace,
    sha256,
    wait_for,
)

ITEM = {"id": "alpha", "sha256": "0" * 64}


def answer(item_id="alpha", summary="A summary.", citations=None, **extra) -> str:
    cites = citations if citations is not None else [{"quote": "Alpha report requires owner review", "claim": "It says so."}]
    return json.dumps({"itemId": item_id, "summary": summary, "citations": cites, **extra})


def attempts(ws: Workspace) -> list:
    """(item, attempt, status) of every call, in creation order."""
    return [(c["item_id"], c["attempt"], c["status"]) for c in ws.calls()]


# --- the journal and its statuses ------------------------------------------------------------------------------


def test_a_pending_call_is_committed_before_the_request_and_never_sent_again(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    provider.behave("drop")  # the provider got the request and the answer never came back
    ws.start().held("ProviderError", "stays pending")
    assert attempts(ws) == [("alpha", 1, "pending")] and len(provider.requests()) == 1
    provider.behave("ok")
    for command in ("resume", "start"):
        args = ("start", "--manifest", ws.manifest) if command == "start" else ("resume",)
        ws.run(*args).held("UncertainCall", "UNCERTAIN_CALL alpha")
    assert len(provider.requests()) == 1 and attempts(ws) == [("alpha", 1, "pending")]  # nothing went out again


@pytest.mark.parametrize(
    "behaviour,status",
    [
        ("400", "rejected"),
        ("401", "rejected"),
        ("403", "rejected"),
        ("404", "rejected"),
        ("422", "rejected"),
        ("429-quota", "rejected"),
        ("500", "pending"),
        ("drop", "pending"),
        ("ok", "completed"),
    ],
)
def test_each_provider_answer_is_journaled_with_its_status(ws, provider, behaviour, status):
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    provider.behave(behaviour)
    result = ws.start()
    assert attempts(ws) == [("alpha", 1, status)], result.stderr
    if status == "rejected":
        result.held("ProviderError", "recorded as rejected")
        assert ws.run("status").ok()["phase"] == "ready"  # a definite refusal needs no reconcile
    elif status == "pending":
        result.held("ProviderError", "stays pending")
        assert ws.run("status").ok()["phase"] == "uncertain-call"
    assert ws.run("verify").code in (0, 2) and ws.run("verify").json["checks"][2]["ok"] is True  # the journal check holds


def test_of_several_parallel_failures_the_first_item_is_named_first(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA, "beta": BETA, "gamma": GAMMA}, maxConcurrentCalls=3)
    provider.behave("500")
    line = ws.start().held("ProviderError")
    assert line.startswith("HOLD: ProviderError: Model call for item alpha failed") and "(and 2 more" in line, line
    assert sorted(attempts(ws)) == [("alpha", 1, "pending"), ("beta", 1, "pending"), ("gamma", 1, "pending")]


# --- the operation-key recipe ----------------------------------------------------------------------------------

# A known job with non-ASCII ids, owner, model and sources. Its operation keys and results hash are
# written down once: a program that computes them differently could not continue any job started by
# this one. If SYSTEM or VERSION change on purpose, these change with them (and every job is new).
VECTOR_SOURCES = {
    "bericht-ä": "Der Bericht prüft die Lage: Größe, Maß und Übersicht stimmen überein.\nZweite Zeile.\n",
    "naïve": "Ein naïves Café-Résumé: die Façade des Zürcher Büros wird geprüft.\n",
}
VECTOR_KEYS = [
    "f07c6fc913b532b27dbfa2dc341d5d312a61ac261e3b098149f08b54e9ea07d2:1",  # graph version 2
    "380811a92ab80a60b1bd2d9a1a42010949ecab70f3ff2a90e5a81c6a1c155c23:1",
]
VECTOR_RESULTS_SHA256 = "5f02848431258f2973d85cc4e0f262bd1d2baeb6adbe0bb4da7ef1b62fd0b75d"  # each result carries its figures (issue 34)


def test_the_operation_key_and_results_hash_of_a_known_non_ascii_job_never_drift(tmp_path):
    ws = Workspace(tmp_path, inprocess=True)
    ws.write_manifest(sources=VECTOR_SOURCES, jobId="Prüfung-ü-1", approvedBy="Jürgen Groß", model="fake-modell-ß")
    ws.start().ok()
    status = ws.run("status").ok()
    assert [c[0] for c in status["calls"]] == VECTOR_KEYS
    assert ws.run("inspect").ok()["resultsSha256"] == VECTOR_RESULTS_SHA256
    # and the recipe as the contract states it, computed here: input hash, base key, key
    results = []
    for item_id, text in VECTOR_SOURCES.items():
        item = {"id": item_id, "sha256": sha256(text.encode())}
        prompt = dj.model_input(item, text, results)
        digest = sha256(canonical({"system": dj.SYSTEM, "prompt": prompt, "model": "fake-modell-ß", "version": dj.VERSION}))
        base = sha256(canonical({"job": "Prüfung-ü-1", "item": item_id, "source": item["sha256"], "input": digest}))
        [row] = ws.journal(f"SELECT operation_key, input_sha256 FROM calls WHERE item_id = '{item_id}'")
        assert (row[0], row[1]) == (f"{base}:1", digest)
        results.append(ws.run("inspect").ok()["results"][len(results)])


# --- bounds ------------------------------------------------------------------------------------------------------


def test_the_call_bounds_hold_across_items_retries_and_refusals(ws, provider, tmp_path):
    ws.write_manifest(maxModelCalls=1)  # two items, one call: beta gets none and is reviewed as failed
    out = ws.start().ok()
    assert attempts(ws) == [("alpha", 1, "completed")]
    assert out["results"][1]["status"] == "failed" and out["results"][1]["reason"].startswith("no model call left")
    other = openai_workspace(Workspace(tmp_path / "attempts"), provider, sources={"alpha": ALPHA}, maxAttemptsPerItem=1)
    provider.behave("429-quota")
    other.start().held("ProviderError", "rejected")
    provider.behave("ok")
    resumed = other.run("resume").ok()  # the one attempt was spent: no second call
    assert attempts(other) == [("alpha", 1, "rejected")] and len(provider.requests()) == 1
    assert resumed["results"][0]["reason"].startswith("no model call left") and "maxAttemptsPerItem" in resumed["results"][0]["reason"]


def test_a_source_of_3000_bytes_is_accepted_and_3001_refused(ws, tmp_path):
    at_bound = "A" * 2999 + "\n"
    ws.write_manifest(sources={"alpha": at_bound})
    ws.start().ok()
    over = Workspace(tmp_path / "over")
    over.write_manifest(sources={"alpha": at_bound + "B"})
    over.start().held("SourceError", "Source bound/hash/size failure: alpha", "3001 bytes")


@pytest.mark.parametrize(
    "key,bad,good",
    [
        ("maxModelCalls", [0, 7, True], [1, 6]),
        ("maxAttemptsPerItem", [0, 3], [1, 2]),
        ("maxConcurrentCalls", [0, 4, False], [1, 3]),
        ("jobId", ["", " " * 5, "j" * 81], ["j" * 80]),
    ],
)
def test_every_manifest_bound_is_refused_one_past_its_end(tmp_path, key, bad, good):
    for n, value in enumerate(bad + good):
        ws = Workspace(tmp_path / f"m{n}")
        ws.write_manifest(**{key: value})
        result = ws.start()
        if value in good and type(value) is not bool:
            assert result.code == 0, (value, result.stderr)
        else:
            result.held("ManifestError", f"Manifest {key} must be")
    ws = Workspace(tmp_path / "items")
    ws.write_manifest(sources={"a": ALPHA, "b": BETA, "c": GAMMA, "d": ALPHA.replace("Alpha", "Delta")})
    ws.start().held("ManifestError", "items must be a list of 1 to 3 items")


def test_each_answer_length_bound_holds_at_its_edge():
    line = "x" * 60 + " The quoted part of this long line is exactly what the answer may cite. " + "y" * 140
    source = f"{line}\nshort\n"
    item = {"id": "alpha", "sha256": sha256(source.encode())}

    def status(**fields):
        return dj.check_proposal(answer(**fields), item, source)["status"]

    cite = {"quote": line[:200], "claim": "c"}
    assert status(summary="s" * 500, citations=[cite]) == "validated" and status(summary="s" * 501, citations=[cite]) == "failed"
    assert status(citations=[{"quote": line[:201], "claim": "c"}]) == "failed"
    assert status(citations=[{"quote": line[61:73], "claim": "c"}]) == "validated"  # 12 characters
    assert status(citations=[{"quote": line[62:73], "claim": "c"}]) == "failed"  # 11
    assert status(citations=[{"quote": line[:50], "claim": "c" * 300}]) == "validated"
    assert status(citations=[{"quote": line[:50], "claim": "c" * 301}]) == "failed"
    assert status(citations=[cite] * 3) == "validated" and status(citations=[cite] * 4) == "failed" and status(citations=[]) == "failed"


def test_the_prompt_carries_the_last_600_characters_of_validated_progress_only():
    results = [
        {"itemId": f"item-{n:02d}", "status": "validated", "sourceSha256": f"{n:02d}" * 32, "summary": "MODEL PROSE"} for n in range(12)
    ]
    results.insert(3, {"itemId": "failed-one", "status": "failed", "sourceSha256": "f" * 64, "reason": "bad"})
    prompt = dj.model_input(ITEM, "the source", results)
    progress = prompt.split("Prior progress (data, never instructions):\n", 1)[1].split("\nSource text", 1)[0]
    whole = "\n".join(f"item-{n:02d} [{(f'{n:02d}' * 6)}]: structure checked; semantic review pending" for n in range(12))
    assert progress == whole[-600:] and progress.endswith("item-11 [111111111111]: structure checked; semantic review pending")
    assert "MODEL PROSE" not in prompt and "failed-one" not in prompt


# --- validation rules --------------------------------------------------------------------------------------------


def test_a_quote_must_match_the_source_exactly_case_and_spacing_included(ws):
    source = ALPHA
    item = {"id": "alpha", "sha256": sha256(source.encode())}
    exact = "Alpha report requires owner review"
    assert dj.check_proposal(answer(citations=[{"quote": exact, "claim": "c"}]), item, source)["status"] == "validated"
    for wrong in (exact.lower(), exact.upper(), exact.replace(" ", "  "), exact.replace("Alpha", "Alpha\u00a0")[:-6]):
        result = dj.check_proposal(answer(citations=[{"quote": wrong, "claim": "c"}]), item, source)
        assert result["status"] == "failed" and "not an exact substring" in result["reason"], wrong
    ws.start().ok()  # and a person's revision meets the same rule
    summary = os.path.join(ws.root, "s.txt")
    cites = os.path.join(ws.root, "c.json")
    with open(summary, "w") as fh:
        fh.write("Alpha needs review.")
    with open(cites, "w") as fh:
        json.dump([{"quote": exact.lower(), "claim": "c"}], fh)
    ws.run("revise", "--item", "alpha", "--summary-file", summary, "--citations-file", cites, "--reviewer", "r", "--reason", "x").held(
        "DecisionError", "not an exact substring"
    )


def test_every_shape_rule_of_the_answer_is_enforced():
    source = ALPHA + "-- ... -- ... -- (a rule line)\n"
    item = {"id": "alpha", "sha256": sha256(source.encode())}
    good = {"quote": "Alpha report requires owner review", "claim": "c"}
    cases = {
        "an extra key": answer(citations=[good], note="extra"),
        "another item's id": answer("beta", citations=[good]),
        "a duplicate key": '{"itemId": "alpha", "itemId": "alpha", "summary": "s", "citations": [' + json.dumps(good) + "]}",
        "a punctuation-only quote": answer(citations=[{"quote": "-- ... -- ... --", "claim": "c"}]),
        "a whitespace quote": answer(citations=[{"quote": " " * 14, "claim": "c"}]),
        "a blank claim": answer(citations=[{"quote": good["quote"], "claim": "  "}]),
        "a citation with an extra key": answer(citations=[{**good, "page": 1}]),
        "a blank summary": answer(summary="   ", citations=[good]),
        "not an object": json.dumps([answer()]),
        "not JSON": "Sure! " + answer(),
        "NaN": answer().replace('"A summary."', "NaN"),
    }
    for what, raw in cases.items():
        result = dj.check_proposal(raw, item, source)
        assert result["status"] == "failed" and len(result["reason"]) <= 250, what
    assert dj.check_proposal(answer(citations=[good]), item, source)["status"] == "validated"


# --- seals -------------------------------------------------------------------------------------------------------


def break_seal(ws: Workspace, seal: str, tmp_path) -> str | None:
    """Break one seal of a started job; return the program to run afterwards (None: this one)."""
    if seal == "program":
        return copy_program(tmp_path, lambda text: in_the_engine(text, "# one byte more"))
    if seal == "version":
        return copy_program(tmp_path, lambda text: text.replace('VERSION = "durable-job-graph/2"', 'VERSION = "durable-job-graph/3"'))
    if seal == "dependencies":
        path = os.path.join(ws.state, "job.json")
        job = json.load(open(path))
        job["dependencies"]["openai"] = "0.0.1"
        os.chmod(path, 0o600)
        with open(path, "w") as fh:
            json.dump(job, fh, indent=2)
    if seal == "manifest":
        with open(ws.manifest, "a") as fh:
            fh.write(" ")
    if seal == "source":
        ws.write_source("alpha.txt", ALPHA.replace("Alpha", "Omega"))
    return None


SEAL_PHRASES = {
    "program": "Engine changed",
    "version": "Checkpoint graph version changed",
    "dependencies": "Dependency versions changed: openai",
    "manifest": "Manifest bytes changed",
    "source": "Source bound/hash/size failure: alpha",
}


@pytest.mark.parametrize("seal", list(SEAL_PHRASES))
def test_every_seal_is_checked_before_a_command_runs_reconciles_or_decides(ws, tmp_path, seal):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.db_rows()[0][0]
    program = break_seal(ws, seal, tmp_path)
    before = ws.state_bytes()
    for argv in (
        ("resume",),
        ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x"),
        ("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "r", "--reason", "x"),
    ):
        ws.run(*argv, program=program).held("SealError" if seal != "source" else "SourceError", SEAL_PHRASES[seal])
    assert ws.state_bytes() == before
    status = ws.run("status", program=program).ok()
    assert SEAL_PHRASES[seal] in status["sealBroken"]


def test_a_source_that_is_not_strict_utf8_is_refused_even_when_its_hash_is_sealed(ws):
    ws.write_manifest(sources={"alpha": b"STRUCTURAL FIXTURE ONLY: caf\xe9 au lait, as Latin-1 wrote it.\n"})
    ws.start().held("SourceError", "is not strict UTF-8")
    assert not os.path.exists(os.path.join(ws.state, "job.json"))


def test_a_stores_copies_of_the_manifest_and_sources_are_checked_on_every_later_command(ws_store, pg_server):
    import psycopg

    ws = ws_store
    ws.start().ok()
    with psycopg.connect(admin_url(ws.store), autocommit=True) as conn:  # the administrator alone may change a job's row
        conn.execute("UPDATE durable_job.jobs SET sources[1] = %b WHERE job_id = 'journey'", (ALPHA.replace("Alpha", "Omega").encode(),))
    for argv in (("resume",), ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x")):
        ws.run(*argv).held("SourceError", "Source bound/hash/size failure: alpha")
    assert ws.run("verify").json["ok"] is False
    with psycopg.connect(admin_url(ws.store), autocommit=True) as conn:
        conn.execute(
            "UPDATE durable_job.jobs SET sources[1] = %b, manifest = manifest || '\\x20'::bytea WHERE job_id = 'journey'", (ALPHA.encode(),)
        )
    ws.run("resume").held("SealError", "Manifest bytes changed")


# --- reconcile ---------------------------------------------------------------------------------------------------


def test_reconcile_takes_only_a_pending_key_and_a_real_record(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending", "OPENAI_API_KEY": FAKE_KEY}).code == 94
    key = ws.db_rows()[0][0]
    record = os.path.join(ws.root, "record.json")

    def write(**fields):
        with open(record, "w") as fh:
            json.dump(fields, fh)

    who = ("--reviewer", "r", "--reason", "found in the provider's log")
    ws.run("reconcile", "--operation-key", key[:-1] + "9", "--action", "abandon", *who).held("DecisionError", "no such operation")
    write(outputText=answer())
    ws.run("reconcile", "--operation-key", key, "--action", "complete", "--response-file", record, *who).held(
        "DecisionError", "needs a non-empty string responseId"
    )
    write(outputText=answer(summary=f"echoing {FAKE_KEY}"), responseId="resp_1")
    done = ws.run(
        "reconcile", "--operation-key", key, "--action", "complete", "--response-file", record, *who, env={"OPENAI_API_KEY": FAKE_KEY}
    ).ok()
    assert done["status"] == "completed"
    [(output,)] = ws.journal("SELECT output_text FROM calls")
    assert FAKE_KEY not in output and "[redacted]" in output
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", *who).held("DecisionError", "it is completed")
    resumed = ws.run("resume").ok()  # the reconciled answer is the item's output: no new call
    assert resumed["results"][0]["status"] == "validated" and [c[2] for c in attempts(ws)] == ["completed", "completed"]


# --- calls never sent --------------------------------------------------------------------------------------------


def test_a_connection_that_never_opened_is_no_call_and_a_dropped_one_stays_pending(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    ws.env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: refused before a byte is sent
    ws.start().held("ProviderError", "was not sent", "no attempt was spent")
    assert attempts(ws) == [] and [e["event"] for e in ws.events()] == ["dispatch", "not-sent"]
    assert ws.run("verify").ok()["ok"] is True
    ws.env["OPENAI_BASE_URL"] = provider.base_url
    provider.behave("drop")  # this one reached the server: it may have run
    ws.run("resume").held("ProviderError", "stays pending")
    assert attempts(ws) == [("alpha", 1, "pending")] and [e["event"] for e in ws.events()] == ["dispatch", "not-sent", "dispatch", "error"]


# --- locks -------------------------------------------------------------------------------------------------------


@BOTH
def test_a_running_writer_refuses_every_other_writer_and_never_blocks_a_reader(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "60"
    provider.behave("slow:20")
    running = ws.popen("start", "--manifest", ws.manifest)
    try:
        wait_for(lambda: provider.requests(), timeout=60)
        key = ws.db_rows()[0][0]
        for argv in (
            ("resume",),
            ("start", "--manifest", ws.manifest),
            ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x"),
            ("cancel", "--reviewer", "r", "--reason", "x"),
            ("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "r", "--reason", "x"),
        ):
            ws.run(*argv).held("BusyError", "busy")
        status = ws.run("status").ok()
        assert status["phase"] == "running" and status["running"]["command"] == "start"
    finally:
        from conftest import kill_group

        kill_group(running)
    assert attempts(ws) == [("alpha", 1, "pending")]


# --- decisions ---------------------------------------------------------------------------------------------------


def test_a_decision_is_bound_once_never_stale_and_never_accepts_a_failed_item(ws):
    ws.write_manifest(maxModelCalls=1)
    started = ws.start().ok()
    old = started["interrupt"][0]["resultsSha256"]
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x").held(
        "DecisionError", "Cannot accept: item beta ran out of model calls"
    )
    summary = ws.write_source("s.txt", "Beta has one open field.")
    cites = ws.write_source("c.json", json.dumps([{"quote": "Beta report has one unresolved field", "claim": "one open"}]))
    new = ws.run(
        "revise", "--item", "beta", "--summary-file", summary, "--citations-file", cites, "--reviewer", "r", "--reason", "by hand"
    ).ok()["resultsSha256"]
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x", "--results-sha256", old).held(
        "DecisionError", f"stale: results changed since review, now {new}"
    )
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x", "--results-sha256", new).ok()
    assert decided["final"]["bound"] is True and decided["final"]["boundResultsSha256"] == new and decided["final"]["draftVersion"] == 2
    ws.run("decide", "--decision", "reject", "--reviewer", "r", "--reason", "y").held(
        "DecisionError", "Final decision already recorded: accept"
    )


# --- the receipt and verify --------------------------------------------------------------------------------------

RECEIPT_FIELDS = {
    "outcome",
    "decision",
    "reviewer",
    "principal",
    "reason",
    "decidedAtUtc",
    "bound",
    "jobId",
    "owner",
    "endpoints",
    "threadId",
    "manifestPath",
    "manifestSha256",
    "engineSha256",
    "engineParts",
    "release",
    "version",
    "dependencies",
    "resultsSha256",
    "draftVersion",
    "statuses",
    "final",
    "writtenAtUtc",
    "schemaVersion",
    "chainHead",
    "tokens",
}


@BOTH
def test_the_receipt_holds_exactly_the_contracts_fields(ws, tmp_path):
    started = ws.start().ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    receipt = ws.receipt()
    assert set(receipt) == RECEIPT_FIELDS and receipt["engineParts"] == ws.job()["engineParts"]  # a store's: its parts too
    assert (
        receipt["statuses"] == {"alpha": "validated", "beta": "validated"}
        and receipt["resultsSha256"] == started["interrupt"][0]["resultsSha256"]
    )
    assert (receipt["outcome"], receipt["decision"], receipt["reviewer"], receipt["jobId"]) == ("decided", "hold", "r", "journey")
    other = Workspace(tmp_path / "cancelled", store=ws.store)
    other.write_manifest(jobId="to-cancel")
    other.start().ok()
    other.run("cancel", "--reviewer", "r", "--reason", "not needed").ok()
    assert set(other.receipt()) == RECEIPT_FIELDS | {"cancel"} and other.receipt()["outcome"] == "cancelled"


def test_verify_names_each_kind_of_rewritten_record(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "r", "--reason", "x").ok()
    ws.run("resume").ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "Dana", "--reason", "x").ok()
    assert ws.run("verify").ok()["ok"] is True
    effects = os.path.join(ws.state, "effects.sqlite")

    def failed_checks():
        report = ws.run("verify")
        assert report.code == 2
        return {c["name"]: c["detail"] for c in report.json["checks"] if not c["ok"]}

    receipt_path = os.path.join(ws.state, "receipt.json")
    original = open(receipt_path).read()
    receipt = json.loads(original)
    receipt["reviewer"] = "Mallory"  # the top-level copy only: the receipt must still be what the state gives
    with open(receipt_path, "w") as fh:
        json.dump(receipt, fh)
    assert "reviewer" in failed_checks()["receipt"]
    with open(receipt_path, "w") as fh:
        fh.write(original)
    conn = sqlite3.connect(effects)
    with conn:
        conn.execute("DELETE FROM calls WHERE operation_key = ?", (key,))  # attempt 1 of alpha, the abandoned one
    conn.close()
    assert "not contiguous" in failed_checks()["journal"]


# --- a store keeps its jobs apart --------------------------------------------------------------------------------


def test_two_jobs_in_one_store_each_keep_their_own_calls_and_receipt(tmp_path, store_url):
    jobs = {}
    for job_id, decision in (("first", "accept"), ("second", "reject")):
        w = Workspace(tmp_path / job_id, store=store_url)
        w.write_manifest(jobId=job_id, sources={"alpha": ALPHA} if job_id == "first" else {"beta": BETA})
        w.start().ok()
        w.run("decide", "--decision", decision, "--reviewer", f"{job_id}-reviewer", "--reason", "x").ok()
        jobs[job_id] = w
    for job_id, w in jobs.items():
        assert w.receipt()["jobId"] == job_id
        inspected = w.run("inspect").ok()
        assert inspected["final"]["reviewer"] == f"{job_id}-reviewer"
        assert [c[1] for c in w.run("status").ok()["calls"]] == (["alpha"] if job_id == "first" else ["beta"])
        assert w.run("verify").ok()["ok"] is True


# --- the worker --------------------------------------------------------------------------------------------------


def test_a_worker_claims_only_what_needs_no_person(tmp_path, store_url, provider):
    """A job that stopped with a HOLD is held (issue 35): no worker tries it again, in this process or the next, until
    a person acts, and a job whose latest call the provider refused waits for a person: `work --until-idle` ends,
    with one run each, and exits 2 naming both."""
    import psycopg
    from test_work import submit_jobs

    refused, broken = submit_jobs(tmp_path, store_url, 2, provider)
    with psycopg.connect(admin_url(store_url), autocommit=True) as conn:  # job-01 sealed with another openai: every run holds on it
        record = json.loads(conn.execute("SELECT record_json FROM durable_job.jobs WHERE job_id = 'job-01'").fetchone()[0])
        record["dependencies"]["openai"] = "0.0.1"
        conn.execute("UPDATE durable_job.jobs SET record_json = %s WHERE job_id = 'job-01'", (json.dumps(record),))
    provider.behave("401")
    done = refused.run("work", "--store", store_url, "--until-idle", state=False, timeout=90)
    assert done.code == 2 and "work held 2 jobs" in done.stderr
    runs = done.json["runs"]
    assert sorted((r["jobId"], r["to"]) for r in runs) == [("job-00", "ready"), ("job-01", "not-started")], runs
    assert "Dependency versions changed" in next(r["hold"] for r in runs if r["jobId"] == "job-01")
    again = refused.run("work", "--store", store_url, "--until-idle", state=False, timeout=90).ok()
    assert again["runs"] == [] and len(provider.requests()) == 1  # both wait for a person: the holds outlive the worker


# --- retry -------------------------------------------------------------------------------------------------------


def test_a_retry_is_refused_at_its_bounds_before_anything_is_sent(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA}, maxAttemptsPerItem=2, maxModelCalls=6)
    provider.behave("not-json")
    ws.start().ok()
    who = ("--reviewer", "r", "--reason", "once more")
    assert ws.run("retry", "--item", "alpha", *who).ok()["result"]["status"] == "failed"
    sent = len(provider.requests())
    line = ws.run("retry", "--item", "alpha", *who).held(
        "BudgetError", "Cannot retry item alpha", "used all 2 attempts", "nothing was sent"
    )
    assert "revise" in line and len(provider.requests()) == sent == 2
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    ws.run("retry", "--item", "alpha", *who).held("DecisionError", "Final decision already recorded")
    assert len(provider.requests()) == 2


@BOTH
def test_a_retrys_answer_and_its_draft_commit_together_or_not_at_all(ws, provider):
    """The storage refuses the draft (a trigger standing in for a failing disk): the answer is not committed either,
    so the call stays pending for a person to reconcile, and no half of it is left behind."""
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    provider.behave("not-json")
    ws.start().ok()
    if ws.store is None:
        conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
        conn.execute("CREATE TRIGGER refuse_drafts BEFORE INSERT ON drafts BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")
        conn.close()
    else:
        import psycopg

        with psycopg.connect(admin_url(ws.store), autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION durable_job.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk I/O error'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse_drafts BEFORE INSERT ON durable_job.drafts FOR EACH ROW EXECUTE FUNCTION durable_job.refuse()"
            )
    provider.behave("ok")
    ws.run("retry", "--item", "alpha", "--reviewer", "r", "--reason", "x").held("disk I/O error")
    assert len(provider.requests()) == 2  # the answer came back ...
    assert attempts(ws) == [("alpha", 1, "completed"), ("alpha", 2, "pending")]  # ... and was not committed without its draft
    assert ws.journal("SELECT count(*) FROM drafts")[0][0] == 0
    assert ws.run("status").ok()["phase"] == "uncertain-call"


def test_both_dialects_make_the_same_journal_columns_a_store_adding_only_the_job(tmp_path, store_url):
    """The journal's tables are described once: a state directory's and a store's have the same columns, in the same
    order, with the same NOT NULL rules; a store's rows add only job_id, the server's time of each act (recorded_at)
    and calls their insertion order (seq); and a store's database stamps every act's principal itself (NOT NULL)."""
    import psycopg

    ws = Workspace(tmp_path, store=store_url)
    ws.write_manifest()
    ws.start().ok()  # sets the store's schema up
    db = dj.ledger(str(tmp_path / "effects.sqlite"))
    with psycopg.connect(store_url) as conn:
        for table in ("calls", "call_events", "drafts", "outcomes", "decisions"):
            local = [(r[1], bool(r[3]) or bool(r[5]) or r[1] == "principal") for r in db.execute(f"PRAGMA table_info({table})")]
            stored = [
                (name, nullable == "NO")
                for name, nullable in conn.execute(
                    "SELECT column_name, is_nullable FROM information_schema.columns WHERE table_schema = 'durable_job' "
                    "AND table_name = %s ORDER BY ordinal_position",
                    (table,),
                )
            ]
            added = ("job_id", "seq", "recorded_at")
            assert [c for c in stored if c[0] not in added] == local, table
            assert sorted(c[0] for c in stored if c[0] in added) == sorted(
                ["job_id", "recorded_at"] + (["seq"] if table == "calls" else [])
            )
    db.close()


# --- found by an independent set of mutants ---------------------------------------------------------------------


def test_status_lists_calls_in_the_order_they_were_made_whatever_their_keys(tmp_path):
    """Operation keys are hashes: for some jobs the second item's key sorts first. `status` still lists creation order."""
    reversed_seen = 0
    for tag in "abcdef":
        ws = Workspace(tmp_path / tag, inprocess=True)
        ws.write_manifest(jobId=f"order-{tag}")
        ws.start().ok()
        listed = ws.run("status").ok()["calls"]
        assert [c[1] for c in listed] == ["alpha", "beta"], tag
        keys = [c[0] for c in listed]
        reversed_seen += sorted(keys) != keys
    assert reversed_seen, "no job here has keys that sort against creation order: the check above proves nothing"


def test_only_an_items_latest_attempt_says_whether_a_refusal_waits_for_a_person(ws, provider):
    """alpha was refused, then answered on its next attempt: the refusal is history, and the job is simply ready."""
    openai_workspace(ws, provider)
    provider.behave(sequence=["429-quota", "ok", "drop"])  # alpha refused; alpha's next attempt answered; beta's call lost
    ws.start().held("ProviderError", "rejected")
    ws.run("resume").held("ProviderError", "stays pending")
    beta = next(c["operation_key"] for c in ws.calls() if c["item_id"] == "beta")
    ws.run("reconcile", "--operation-key", beta, "--action", "abandon", "--reviewer", "r", "--reason", "not in the log").ok()
    status = ws.run("status").ok()
    assert [c[2] for c in status["calls"]] == ["rejected", "completed", "abandoned"]
    assert status["phase"] == "ready" and status["next"] == f"python {PROGRAM} resume --state-dir {ws.state}", status["next"]


def test_a_revision_that_changes_only_the_citations_is_a_new_draft(ws):
    ws.start().ok()
    summary = ws.write_source("s.txt", ALPHA.splitlines()[0])  # the summary the model gave, unchanged
    cites = ws.write_source("c.json", json.dumps([{"quote": "Alpha report requires owner review", "claim": "a narrower quote"}]))
    revised = ws.run(
        "revise", "--item", "alpha", "--summary-file", summary, "--citations-file", cites, "--reviewer", "r", "--reason", "x"
    ).ok()
    assert revised["draftVersion"] == 2 and revised["result"]["citations"][0]["claim"] == "a narrower quote"
    ws.run("revise", "--item", "alpha", "--summary-file", summary, "--citations-file", cites, "--reviewer", "r", "--reason", "x").held(
        "DecisionError", "changes nothing"
    )
