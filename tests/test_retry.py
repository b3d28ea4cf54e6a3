"""Failed items a person can act on (issue 15, items 4 and 10): the failure reason wherever a status is
shown, `retry` spending an item's next model call on purpose at review, the raw output and clipped ids
on the review page, and the job's thread beside the operation key in every provider request.

All through the real CLI in subprocesses, with the fake model, the loopback provider and Chromium.
"""

import glob
import html
import json
import os
import sqlite3

import pytest
from test_review import assert_self_contained_and_inert, parse_page, png_pixels, screenshot, write

from conftest import BOTH, PROGRAM, Workspace, openai_workspace, paste, store_rows

INVALID = {"DURABLE_JOB_FAKE_OUTPUT": "invalid-citation"}
ANSWER = {
    "itemId": "alpha",
    "summary": "Alpha needs the owner's review.",
    "citations": [{"quote": "Alpha report requires owner review", "claim": "The owner reviews it."}],
}


def retry(ws: Workspace, item="alpha", reviewer="dana", reason="the quote was wrong; try once more", *extra, env=None):
    return ws.run("retry", "--item", item, "--reviewer", reviewer, "--reason", reason, *extra, env=env)


def checkpoint_rows(ws: Workspace) -> tuple:
    """How many checkpoints and writes the job's thread has (effects.sqlite, or the store's own test database)."""
    if ws.store is not None:
        rows = store_rows(ws.store)
        return len(rows["checkpoints"]), len(rows["checkpoint_writes"])
    conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
    try:
        return conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0], conn.execute("SELECT count(*) FROM writes").fetchone()[0]
    finally:
        conn.close()


def started_invalid(ws: Workspace) -> dict:
    out = ws.start(env=INVALID).ok()
    assert [r["status"] for r in out["results"]] == ["failed", "failed"]
    return out


# --- the reason wherever the status is shown ---------------------------------------------------------


def test_a_failed_items_reason_is_shown_wherever_its_status_is_and_next_offers_retry_and_revise(ws):
    started = started_invalid(ws)
    reason = "citation 1: quote 'NOT IN SOURCE' is not an exact substring of the source"
    assert [r["reason"] for r in started["results"]] == [reason, reason]
    status = ws.run("status").ok()
    assert [(r["itemId"], r["status"], r["reason"]) for r in status["results"]] == [("alpha", "failed", reason), ("beta", "failed", reason)]
    for argv in (("status", "--text"), ("resume", "--text"), ("inspect", "--text")):
        assert f"alpha        failed — {reason}" in ws.run(*argv).stdout, argv

    # the ways on, ready to paste: retry (the next attempt is within the bounds), revise, or decide reject|hold
    retry_cmd = f"python {PROGRAM} retry --state-dir {ws.state} --item alpha --reviewer YOU --reason WHY"
    revise_cmd = (
        f"python {PROGRAM} revise --state-dir {ws.state} --item alpha --summary-file SUMMARY.txt "
        "--citations-file CITATIONS.json --reviewer YOU --reason WHY"
    )
    following = status["next"]
    assert following.startswith(f"item alpha failed ({reason}) (1 more failed: beta)")
    assert retry_cmd in following and revise_cmd in following
    assert following.endswith(f"or decide: {started['interrupt'][0]['decideCommand']}")
    for out in (started, ws.run("resume").ok(), ws.run("inspect").ok()):
        first = out["failedItems"][0]
        assert (first["itemId"], first["reason"], first["retryCommand"], first["reviseCommand"]) == ("alpha", reason, retry_cmd, revise_cmd)
    text = ws.run("resume", "--text").stdout
    assert f"alpha failed: retry it (spends its next model call): {retry_cmd}" in text and f"or revise it by hand: {revise_cmd}" in text

    # revising alpha by hand: the revise output still shows the way on for beta
    revised = ws.run(
        "revise",
        "--item",
        "alpha",
        "--summary-file",
        write(ws, "s.txt", ANSWER["summary"]),
        "--citations-file",
        write(ws, "c.json", ANSWER["citations"]),
        "--reviewer",
        "rita",
        "--reason",
        "by hand",
    ).ok()
    assert [f["itemId"] for f in revised["failedItems"]] == ["beta"]
    assert ws.run("status").ok()["next"].startswith("item beta failed")


# --- retry: a journey ----------------------------------------------------------------------------------


@BOTH
def test_retry_spends_the_next_attempt_on_purpose_and_makes_a_new_draft(ws):
    """invalid-citation, then retry without it: a journaled call, a new draft, stale old bindings, verify ok."""
    h1 = started_invalid(ws)["interrupt"][0]["resultsSha256"]
    (alpha_key, _, _, _), (beta_key, _, _, _) = ws.db_rows()
    checkpoints = checkpoint_rows(ws)

    out = retry(ws).ok()
    assert out["itemId"] == "alpha" and out["attempt"] == 2 and out["draftVersion"] == 2
    assert out["operationKey"] == alpha_key.rsplit(":", 1)[0] + ":2"  # the same key recipe, the next attempt
    assert out["previousResultsSha256"] == h1 and out["resultsSha256"] != h1
    assert out["result"]["status"] == "validated" and out["result"]["retry"]["reviewer"] == "dana"
    h2 = out["resultsSha256"]
    assert ws.db_rows() == [
        (alpha_key, "alpha", "completed", 1),
        (beta_key, "beta", "completed", 1),
        (out["operationKey"], "alpha", "completed", 2),
    ]
    assert [(e["operation_key"], e["detail"]) for e in ws.events(event="retry")] == [
        (
            out["operationKey"],
            {
                "itemId": "alpha",
                "reviewer": "dana",
                "reason": "the quote was wrong; try once more",
                "draftVersion": 1,
                "principal": ws.principal(),
            },
        )
    ]
    assert checkpoint_rows(ws) == checkpoints  # the thread still waits at review: the graph did not run

    inspected = ws.run("inspect").ok()
    assert inspected["resultsSha256"] == h2 and inspected["draftVersion"] == 2
    assert [r["status"] for r in inspected["results"]] == ["validated", "failed"]
    assert inspected["drafts"][0]["change"]["retry"] == {"operationKey": out["operationKey"], "attempt": 2}
    who = f"dana ({ws.principal_label} {ws.principal()})"
    assert f"(retried in draft 2 by {who}, attempt 2)" in ws.run("inspect", "--text").stdout

    ws.run("decide", "--decision", "hold", "--reviewer", "dana", "--reason", "x", "--results-sha256", h1).held(
        f"stale: results changed since review, now {h2}"
    )
    ws.run("decide", "--decision", "accept", "--reviewer", "dana", "--reason", "x").held("Cannot accept", "beta")
    retry(ws).held("Item alpha is validated", "retry is for a failed item", "revise")

    # the printed retry command, pasted with its placeholders filled in, retries beta
    command = out["failedItems"][0]["retryCommand"]
    h3 = paste(ws, command, YOU="sam", WHY="beta too").ok()["resultsSha256"]
    assert ws.run("verify").ok()["ok"] is True
    final = ws.run("decide", "--decision", "accept", "--reviewer", "dana", "--reason", "both retried", "--results-sha256", h3).ok()["final"]
    assert final["draftVersion"] == 3 and final["statuses"] == {"alpha": "validated", "beta": "validated"}
    assert ws.run("verify").ok()["ok"] is True
    retry(ws, "beta").held("Final decision already recorded")


def test_a_retry_that_fails_again_is_still_a_new_draft_and_its_bound_is_then_named(ws):
    started_invalid(ws)
    out = retry(ws, env=INVALID).ok()
    assert out["result"]["status"] == "failed" and out["draftVersion"] == 2 and out["result"]["reason"].startswith("citation 1")
    text = retry(ws, "beta", "dana", "again", "--text", env=INVALID).stdout
    assert "now draft 3: beta failed — citation 1" in text
    before = ws.state_bytes()
    line = retry(ws).held(
        "BudgetError",
        "Cannot retry item alpha",
        "all 2 attempts",
        "maxAttemptsPerItem",
        f"revise --state-dir {ws.state} --item alpha",
        "decide reject or hold",
        "nothing was sent",
    )
    assert "--decision 'reject|hold'" in line
    assert ws.state_bytes() == before
    failed = ws.run("inspect").ok()["failedItems"]
    assert "retryCommand" not in failed[0] and "maxAttemptsPerItem" in failed[0]["retryRefused"]
    assert (
        " retry " not in ws.run("status").ok()["next"]
        and "alpha failed: no retry (item alpha has used all 2" in ws.run("inspect", "--text").stdout
    )
    assert ws.run("verify").ok()["ok"] is True


# --- retry: refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bounds, phrase",
    [
        ({"maxAttemptsPerItem": 1}, "all 1 attempt the manifest allows (maxAttemptsPerItem)"),
        ({"maxModelCalls": 2}, "the journal already holds 2 calls, the manifest's maxModelCalls 2"),
    ],
)
def test_retry_beyond_the_bounds_is_refused_naming_the_bound_and_the_alternatives(ws, bounds, phrase):
    ws.write_manifest(**bounds)
    started_invalid(ws)
    before = ws.state_bytes()
    retry(ws).held("BudgetError", phrase, "nothing was sent", "Revise it by hand", "decide reject or hold")
    assert ws.state_bytes() == before


@BOTH
def test_retry_is_refused_where_the_job_is_not_at_review(ws, tmp_path):
    started_invalid(ws)
    before = ws.state_bytes()
    retry(ws, "gamma").held("No item 'gamma'", "alpha, beta")
    ws.run("retry", "--item", "alpha", "--reviewer", " ", "--reason", "x").held("--reviewer must be")
    ws.run("retry", "--item", "alpha", "--reason", "x").held("UsageError", "--reviewer")
    assert ws.state_bytes() == before

    # mid-run (an uncertain call), decided, cancelled: nothing is sent
    mid = Workspace(tmp_path / "mid")
    mid.write_manifest()
    assert mid.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger", **INVALID}).code == 91
    retry(mid).held("Cannot retry yet", "UNCERTAIN_CALL alpha")
    decided = Workspace(tmp_path / "decided")
    decided.write_manifest()
    started_invalid(decided)
    decided.run("decide", "--decision", "reject", "--reviewer", "dana", "--reason", "wrong").ok()
    retry(decided).held("Final decision already recorded")
    cancelled = Workspace(tmp_path / "cancelled")
    cancelled.write_manifest()
    started_invalid(cancelled)
    cancelled.run("cancel", "--reviewer", "olga", "--reason", "stop").ok()
    retry(cancelled).held("cancelled")
    for w, calls in ((mid, 1), (decided, 2), (cancelled, 2)):
        assert len(w.db_rows()) == calls


# --- retry: crashes --------------------------------------------------------------------------------


@BOTH
def test_a_retry_killed_after_its_pending_row_stops_everything_until_reconciled_then_completes_as_a_draft(ws):
    """after-pending: UNCERTAIN_CALL for retry, resume, decide and revise; reconcile complete makes the draft."""
    h1 = started_invalid(ws)["interrupt"][0]["resultsSha256"]
    assert retry(ws, env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.db_rows()[-1][0]
    assert ws.db_rows()[-1][1:] == ("alpha", "pending", 2)
    status = ws.run("status").ok()
    assert status["phase"] == "uncertain-call" and status["next"].startswith(f"UNCERTAIN_CALL alpha {key}")
    before = ws.state_bytes()
    retry(ws).held("UncertainCall", f"UNCERTAIN_CALL alpha {key}")
    retry(ws, "beta").held(f"UNCERTAIN_CALL alpha {key}")
    ws.run("resume").held(f"UNCERTAIN_CALL alpha {key}")
    ws.run("decide", "--decision", "hold", "--reviewer", "dana", "--reason", "x").held("Cannot decide now", f"UNCERTAIN_CALL alpha {key}")
    ws.run("revise", "--item", "alpha", "--summary-file", write(ws, "s.txt", "A summary."), "--reviewer", "r", "--reason", "x").held(
        "UNCERTAIN_CALL"
    )
    assert ws.state_bytes() == before and ws.run("inspect").ok()["draftVersion"] == 1

    # the provider's log had the answer: completing the call completes the retry
    answer = write(ws, "answer.json", {"outputText": json.dumps(ANSWER), "responseId": "resp_from_log"})
    done = ws.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--response-file",
        answer,
        "--reviewer",
        "olga",
        "--reason",
        "found in the usage log",
    ).ok()
    assert done["retryDraft"]["draftVersion"] == 2 and done["retryDraft"]["result"]["status"] == "validated"
    assert done["retryDraft"]["reviewer"] == "dana"  # the draft is the retry's: who asked for it, and why
    inspected = ws.run("inspect").ok()
    assert inspected["phase"] == "awaiting-review" and inspected["draftVersion"] == 2
    assert inspected["results"][0]["summary"] == ANSWER["summary"] and inspected["resultsSha256"] != h1
    assert ws.run("resume").ok()["interrupt"][0]["resultsSha256"] == inspected["resultsSha256"]  # nothing else to do
    assert ws.run("verify").ok()["ok"] is True
    ws.run("decide", "--decision", "hold", "--reviewer", "dana", "--reason", "x", "--results-sha256", inspected["resultsSha256"]).ok()
    assert ws.run("verify").ok()["ok"] is True


@BOTH
def test_a_retry_abandoned_after_a_crash_leaves_the_results_as_they_were_and_spends_the_attempt(ws):
    h1 = started_invalid(ws)["interrupt"][0]["resultsSha256"]
    assert retry(ws, env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[-1][0]
    out = ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "olga", "--reason", "no usage").ok()
    assert "retryDraft" not in out
    inspected = ws.run("inspect").ok()
    assert inspected["draftVersion"] == 1 and inspected["resultsSha256"] == h1 and inspected["phase"] == "awaiting-review"
    retry(ws).held("maxAttemptsPerItem")  # the abandoned retry was attempt 2 of 2
    assert ws.run("verify").ok()["ok"] is True
    ws.run("decide", "--decision", "reject", "--reviewer", "dana", "--reason", "x", "--results-sha256", h1).ok()
    assert ws.run("verify").ok()["ok"] is True


@BOTH
def test_a_job_cancelled_during_a_retrys_uncertain_call_keeps_its_results_when_the_call_is_reconciled(ws):
    """After a cancel nothing changes the reviewed results: the reconciled answer is journaled, not drafted."""
    h1 = started_invalid(ws)["interrupt"][0]["resultsSha256"]
    assert retry(ws, env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.db_rows()[-1][0]
    assert "retry --state-dir" not in json.dumps(ws.run("inspect").ok().get("failedItems"))  # reconcile first
    assert ws.run("cancel", "--reviewer", "olga", "--reason", "provider incident").ok()["cancelled"]["pendingCalls"] == [key]
    answer = write(ws, "answer.json", {"outputText": json.dumps(ANSWER), "responseId": "resp_from_log"})
    out = ws.run(
        "reconcile", "--operation-key", key, "--action", "complete", "--response-file", answer, "--reviewer", "olga", "--reason", "billed"
    ).ok()
    assert out["status"] == "completed" and "retryDraft" not in out
    assert ws.run("inspect").ok()["resultsSha256"] == h1
    assert ws.run("verify").ok()["ok"] is True


def test_a_retry_killed_right_after_its_answer_was_journaled_already_has_its_draft(ws):
    """after-ledger: the answer and its draft commit together, so nothing is lost and nothing is asked twice."""
    started_invalid(ws)
    assert retry(ws, env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"}).code == 92
    inspected = ws.run("inspect").ok()
    assert inspected["draftVersion"] == 2 and inspected["results"][0]["status"] == "validated"
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    assert ws.run("verify").ok()["ok"] is True


def test_verify_catches_a_retry_draft_that_does_not_match_its_call(ws):
    started_invalid(ws)
    retry(ws).ok()
    conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
    conn.execute("UPDATE call_events SET detail_json=replace(detail_json, 'dana', 'mallory') WHERE event='retry'")
    conn.commit()
    conn.close()
    ws.run("verify").held("verify found", "drafts")


# --- retry over HTTP -------------------------------------------------------------------------------


def test_retry_goes_through_the_real_provider_path(ws, provider):
    openai_workspace(ws, provider)
    provider.behave(by_input={"Alpha report": "not-json"})
    started = ws.start().ok()
    assert [r["status"] for r in started["results"]] == ["failed", "validated"]
    assert "not valid JSON" in started["results"][0]["reason"]
    provider.behave("ok")
    ws.run("retry", "--item", "alpha", "--reviewer", "dana", "--reason", "x", env={"OPENAI_API_KEY": ""}).held("OPENAI_API_KEY is not set")
    out = retry(ws).ok()
    requests = provider.requests()
    assert len(requests) == 3 and out["result"]["status"] == "validated"
    assert requests[-1]["headers"]["x-client-request-id"] == out["operationKey"]
    assert requests[-1]["input"] == requests[0]["input"]  # the same prompt: the same work, its next attempt
    assert requests[-1]["headers"]["x-durable-job-thread"] == ws.job()["threadId"]
    assert ws.db_rows()[-1] == (out["operationKey"], "alpha", "completed", 2)
    assert ws.run("verify").ok()["ok"] is True


def test_a_retry_whose_connection_never_opened_spends_nothing_and_can_be_asked_again(ws, provider):
    """Nothing listens at the URL: no call happened, so no attempt is spent; after the fix the retry just works."""
    import socket

    openai_workspace(ws, provider)
    provider.behave(by_input={"Alpha report": "not-json"})
    ws.start().ok()
    provider.behave("ok")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    rows = ws.db_rows()
    retry(ws, env={"OPENAI_BASE_URL": closed}).held("was not sent", closed, "run this retry again")
    assert ws.db_rows() == rows and ws.run("inspect").ok()["draftVersion"] == 1
    assert ws.run("verify").ok()["ok"] is True
    out = retry(ws, reviewer="sam").ok()
    assert out["attempt"] == 2 and out["result"]["status"] == "validated" and len(provider.requests()) == 3
    assert ws.run("verify").ok()["ok"] is True


def test_two_jobs_from_one_manifest_are_told_apart_in_the_providers_log(ws, provider, tmp_path):
    """The operation keys are the same work's (as the SPEC fixes them); the thread header names each job."""
    openai_workspace(ws, provider)
    ws.start().ok()
    second = os.path.join(str(tmp_path), "second-state")
    ws.run("start", "--manifest", ws.manifest, "--state-dir", second).ok()
    with open(os.path.join(second, "job.json")) as fh:
        threads = [ws.job()["threadId"], json.load(fh)["threadId"]]
    requests = provider.requests()
    assert len(requests) == 4
    keys = [r["headers"]["x-client-request-id"] for r in requests]
    assert keys[:2] == keys[2:]
    assert [r["headers"]["x-durable-job-thread"] for r in requests] == [threads[0]] * 2 + [threads[1]] * 2
    assert threads[0] != threads[1]


# --- the review page --------------------------------------------------------------------------------


def page_after_reconcile(root, response_id: str, output_text: str) -> tuple:
    """A job whose alpha answer came from a reconcile (so its ids are what the person saved): its page path."""
    ws = Workspace(root)
    ws.write_manifest()
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    answer = write(ws, "answer.json", {"outputText": output_text, "responseId": response_id, "requestId": "req_1"})
    ws.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--response-file",
        answer,
        "--reviewer",
        "olga",
        "--reason",
        "found in the usage log",
    ).ok()
    ws.run("resume").ok()
    page = os.path.join(str(root), "review.html")
    ws.run("inspect", "--html", page).ok()
    return ws, page


def test_review_page_shows_a_failed_items_raw_output_and_the_ways_on(tmp_path):
    raw = 'Sure! <script>alert(1)</script> {"itemId": "alpha", & more}'
    ws, path = page_after_reconcile(tmp_path, "resp_short", raw)
    page = parse_page(path)
    assert_self_contained_and_inert(page)
    assert raw in page.alltext and "<script>" not in page.raw
    section = page.raw[page.raw.index("<section id='item0'>") :]
    section = section[: section.index("</section>")]
    assert "The model's raw output (attempt 1, from the journal)" in section and html.escape(raw) in section
    assert f"retry --state-dir {ws.state} --item alpha" in section and f"revise --state-dir {ws.state} --item alpha" in section


def test_a_long_response_id_is_clipped_on_a_phone_with_the_full_value_one_tap_away(tmp_path):
    long_id = "resp_" + "0123456789abcdef" * 25  # 405 characters, as one provider sends
    answer = json.dumps(
        {"itemId": "alpha", "summary": "Alpha needs review.", "citations": [{"quote": "Alpha report requires owner review", "claim": "c"}]}
    )
    _, long_page = page_after_reconcile(tmp_path / "long", long_id, answer)
    _, short_page = page_after_reconcile(tmp_path / "short", "resp_" + "0" * 20, answer)
    page = parse_page(long_page)
    assert_self_contained_and_inert(page)
    assert long_id in page.alltext  # the whole value is on the page, behind its clipped summary
    at = page.raw.index(long_id)
    details = page.raw[page.raw.rindex("<details", 0, at) : page.raw.index("</details>", at)]
    summary = details[details.index("<summary") : details.index("</summary>")]
    assert long_id not in summary.split(">", 1)[1] and "…" in summary and f"title='{long_id}'" in summary

    # rendered at 390 px, the long id costs no more height than a short one (it wrapped to 17 lines)
    heights = []
    for name, path in (("long", long_page), ("short", short_page)):
        png = str(tmp_path / f"{name}.png")
        screenshot(path, png, tmp_path, size=(390, 3200))
        width, height, rows = png_pixels(png)
        background = rows[-1][0]
        heights.append(max(y for y, row in enumerate(rows) if any(p != background for p in row)))
        assert len({row[-1] for row in rows}) <= 3  # nothing wider than the phone
    assert heights[0] - heights[1] < 40, heights


# --- the walk-through (docs/real-job.md, moved there from the README) ------------------------------------------


def test_the_walk_through_keeps_jobs_outside_the_clone_and_git_ignores_state():
    repo = os.path.dirname(PROGRAM)
    pages = [os.path.join(repo, "README.md"), *glob.glob(os.path.join(repo, "docs", "*.md"))]
    docs = ""
    for path in pages:
        with open(path, encoding="utf-8") as fh:
            docs += fh.read()
    with open(os.path.join(repo, "docs", "real-job.md"), encoding="utf-8") as fh:
        walk_through = fh.read()
    with open(os.path.join(repo, ".gitignore"), encoding="utf-8") as fh:
        ignored = fh.read().split()
    assert {"state", ".venv"} <= {line.strip("/") for line in ignored}
    assert "--state-dir state/" not in docs and "--out job/" not in docs
    assert "--state-dir ~/jobs/q3/state" in walk_through
    assert "X-Durable-Job-Thread" in walk_through and "never retried automatically" in walk_through
