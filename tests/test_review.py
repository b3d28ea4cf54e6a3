"""The review workflow as a person lives it: same-job start, hash-bound decisions, revisions,
cancel, receipts, the review page (parsed and rendered in headless Chromium), seal, and the
terminal/text/JSON output — all through the real CLI in subprocesses.
"""

import html
import html.parser
import json
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

import durable_job as dj
from conftest import ALPHA, BETA, BOTH, GAMMA, PROGRAM, Workspace, as_role, clean_env, engine_digest, openai_workspace, paste, sha256

REVISED_SUMMARY = "Alpha needs the owner's review before any decision is taken.\n"
REVISED_CITATIONS = [
    {"quote": "Alpha report requires owner review", "claim": "The owner must review it."},
    {"quote": "describes no real event", "claim": "The report is synthetic."},
]


def write(ws: Workspace, name: str, data) -> str:
    path = os.path.join(ws.root, name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(data if isinstance(data, str) else json.dumps(data))
    return path


def revise(
    ws: Workspace,
    item="alpha",
    summary=REVISED_SUMMARY,
    citations=REVISED_CITATIONS,
    reviewer="rita",
    reason="clearer wording",
    *extra,
    **kw,
):
    args = [
        "revise",
        "--item",
        item,
        "--summary-file",
        write(ws, f"summary-{item}.txt", summary),
        "--reviewer",
        reviewer,
        "--reason",
        reason,
        *extra,
    ]
    if citations is not None:
        args += ["--citations-file", write(ws, f"citations-{item}.json", citations)]
    return ws.run(*args, **kw)


def decide(ws: Workspace, decision="accept", digest=None, reviewer="dana", reason="quotes checked"):
    args = ["decide", "--decision", decision, "--reviewer", reviewer, "--reason", reason]
    if digest is not None:
        args += ["--results-sha256", digest]
    return ws.run(*args)


# --- start on a directory that already holds a job ----------------------------------------------------


def test_start_again_on_the_same_job_continues_it_and_says_so(ws):
    """The same jobId and manifest bytes: no error, no second run, the same thread, `existing: true`."""
    first = ws.start().ok()
    assert first["existing"] is False
    job_before, rows_before = ws.job(), ws.db_rows()

    again = ws.start().ok()
    assert again["existing"] is True
    assert again["results"] == first["results"] and again["interrupt"] == first["interrupt"]
    assert ws.job() == job_before and ws.db_rows() == rows_before  # same thread, no new call

    # an identical copy of the manifest elsewhere is the same job too
    copy = os.path.join(ws.src, "copy-of-manifest.json")
    shutil.copyfile(ws.manifest, copy)
    assert ws.run("start", "--manifest", copy).ok()["existing"] is True
    assert ws.db_rows() == rows_before

    text = ws.run("start", "--manifest", ws.manifest, "--text").stdout
    assert "existing job" in text and "continued" in text, text


def test_start_again_after_a_crash_resumes_exactly_like_resume(ws):
    """Same job, interrupted mid-run: start behaves as resume (the uncertain call is refused, not redone)."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    ws.start().held("UNCERTAIN_CALL alpha", key)
    ws.run("resume").held("UNCERTAIN_CALL alpha", key)
    assert [r[2] for r in ws.db_rows()] == ["pending"]

    # after-ledger: the completed call is reused by start exactly as resume would
    other = Workspace(os.path.join(ws.root, "second"))
    other.write_manifest()
    assert other.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"}).code == 92
    out = other.start().ok()
    assert out["existing"] is True and [r["status"] for r in out["results"]] == ["validated", "validated"]
    assert [(r[1], r[2], r[3]) for r in other.db_rows()] == [("alpha", "completed", 1), ("beta", "completed", 1)]


@pytest.mark.parametrize(
    "change, phrase",
    [
        ({"jobId": "another-request"}, "job id"),
        ({"approvedBy": "someone-else@example.test"}, "owner (approvedBy)"),
        ("source", "source data"),
    ],
)
def test_start_on_a_directory_of_another_request_is_refused(ws, change, phrase):
    """A different job id, owner or source data: the directory belongs to that request; nothing changes."""
    ws.start().ok()
    before = ws.state_bytes()
    if change == "source":
        manifest = ws.manifest_dict(sources={"alpha": ALPHA.replace("Alpha", "ALPHA"), "beta": BETA})
    else:
        manifest = ws.manifest_dict(**change)
    ws.write_manifest(manifest)
    line = ws.start().held("Existing job", "belongs to another request", "new --state-dir", phrase)
    assert "journey" in line
    assert ws.state_bytes() == before


def test_start_with_the_same_manifest_but_changed_source_bytes_is_refused(ws):
    """Same manifest bytes, but a source was edited on disk: the seal refuses before anything runs."""
    ws.start().ok()
    before = ws.state_bytes()
    ws.write_source("alpha.txt", ALPHA + "tampered\n")
    ws.start().held("Source bound/hash/size failure: alpha")
    assert ws.state_bytes() == before


# --- decisions bound to the reviewed results -------------------------------------------------------------


def test_bound_decide_refuses_stale_hash_atomically_then_records_bound(ws):
    started = ws.start().ok()
    digest = started["interrupt"][0]["resultsSha256"]
    before = ws.state_bytes()

    stale = "0" * 64
    line = decide(ws, digest=stale).held("stale: results changed since review, now", digest, "inspect again")
    assert stale not in line.split("now", 1)[1].split(";")[0]
    for empty_or_malformed in ("", " ", digest.upper(), digest[:12]):  # "$H" with H unset must never decide unbound
        decide(ws, digest=empty_or_malformed).held("is not a sha256", "pass resultsSha256 from inspect")
    assert ws.state_bytes() == before and not os.path.exists(os.path.join(ws.state, "receipt.json"))
    assert ws.run("inspect").ok()["final"] is None

    final = decide(ws, digest=digest).ok()["final"]
    assert final["bound"] is True and final["boundResultsSha256"] == digest == final["resultsSha256"]
    receipt = json.load(open(os.path.join(ws.state, "receipt.json")))
    assert receipt["bound"] is True and receipt["final"] == final


def test_unbound_decide_says_it_was_not_bound(ws):
    ws.start().ok()
    final = decide(ws, "hold").ok()["final"]
    assert final["bound"] is False and final["boundResultsSha256"] is None
    assert json.load(open(os.path.join(ws.state, "receipt.json")))["bound"] is False


def test_interrupt_inspect_and_status_show_the_same_ready_to_paste_bound_command(ws):
    started = ws.start().ok()
    bundle = started["interrupt"][0]
    command = bundle["decideCommand"]
    assert command == ws.run("inspect").ok()["decideCommand"] == ws.run("status").ok()["next"]
    assert f"--results-sha256 {bundle['resultsSha256']}" in command
    assert f"--state-dir {ws.state}" in command
    for fmt in ("start", "inspect", "status"):
        args = ("start", "--manifest", ws.manifest) if fmt == "start" else (fmt,)
        assert command in ws.run(*args, "--text").stdout, fmt

    # pasted, with the placeholders filled in, it records a bound decision
    final = paste(ws, command, **{"accept|reject|hold": "hold", "YOU": "dana", "WHY": "pasted from the interrupt"}).ok()["final"]
    assert final["decision"] == "hold" and final["bound"] is True and final["reviewer"] == "dana"


# --- what people type and what the terminal shows --------------------------------------------------------


def test_a_summary_saved_with_a_bom_and_crlf_is_stored_as_its_words(ws):
    ws.start().ok()
    path = os.path.join(ws.root, "bom.txt")
    with open(path, "wb") as fh:
        fh.write(b"\xef\xbb\xbfAlpha needs the owner's review.\r\nFirst, the owner reads it.\r\n")
    ws.run("revise", "--item", "alpha", "--summary-file", path, "--reviewer", "rita", "--reason", "saved on Windows").ok()
    assert ws.run("inspect").ok()["results"][0]["summary"] == "Alpha needs the owner's review.\nFirst, the owner reads it."


def test_oversized_and_empty_file_arguments_are_named_for_what_they_are(ws):
    ws.start().ok()
    before = ws.state_bytes()
    big = os.path.join(ws.root, "big.txt")
    with open(big, "w", encoding="utf-8") as fh:
        fh.write("é" * 40000)  # valid UTF-8, 80 kB
    ws.run("revise", "--item", "alpha", "--summary-file", big, "--reviewer", "r", "--reason", "x").held("is over 65536 bytes")
    summary = write(ws, "s.txt", "A short summary.")
    for argv in (
        ["revise", "--item", "alpha", "--summary-file", summary, "--citations-file", "", "--reviewer", "r", "--reason", "x"],
        ["inspect", "--html", ""],
        ["status", "--state-dir", ""],
        ["start", "--manifest", " "],
    ):
        ws.run(*argv).held("UsageError", "is empty", "unset shell variable")
    assert ws.state_bytes() == before


def test_model_text_cannot_drive_the_terminal(ws, tmp_path):
    """Escape sequences and newlines in a summary are shown, not obeyed, by every text output."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    summary = "Fine.\x1b[1A\x1b[2K\n  beta         validated\x1b]0;pwned\x07 \u202eevil"
    answer = {"itemId": "alpha", "summary": summary, "citations": [{"quote": "Alpha report requires owner review", "claim": "c\x1b[31m"}]}
    response = tmp_path / "answer.json"
    response.write_text(json.dumps({"outputText": json.dumps(answer), "responseId": "resp_1"}))
    ws.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--reviewer",
        "ops\x1b[2J",
        "--reason",
        "found",
        "--response-file",
        str(response),
    ).ok()
    ws.run("resume").ok()
    assert ws.run("inspect").ok()["results"][0]["summary"] == summary  # the JSON keeps the exact text
    for argv in (("inspect", "--text"), ("status", "--text"), ("resume", "--text")):
        out = ws.run(*argv).stdout
        assert not any(ch in out for ch in "\x1b\x07\u202e"), argv
    shown = ws.run("inspect", "--text").stdout
    assert "summary: Fine.\\x1b[1A\\x1b[2K\\n  beta         validated" in shown
    assert shown.count("beta         validated") == 2  # its own line, and the one shown inside alpha's summary


def test_the_decide_command_offers_accept_only_when_every_item_validated(ws):
    ws.write_manifest(maxModelCalls=1)
    command = ws.start().ok()["interrupt"][0]["decideCommand"]
    assert "--decision 'reject|hold'" in command
    assert command == ws.run("inspect").ok()["decideCommand"]
    # beta failed for want of a call: `next` offers revising it by hand first, then this decision (issue 15.4)
    following = ws.run("status").ok()["next"]
    assert following.startswith("item beta failed (no model call left") and following.endswith(f"or decide: {command}")
    assert f"revise --state-dir {ws.state} --item beta" in following and " retry " not in following


def test_a_failing_verify_prints_its_report_in_the_format_asked_for(ws):
    ws.start().ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    os.unlink(os.path.join(ws.state, "receipt.json"))
    text = ws.run("verify", "--text")
    text.held("receipt.json is missing", f"`python {PROGRAM} resume --state-dir {ws.state}` rewrites it")
    assert text.stdout.startswith("verify: job journey") and "FAIL" in text.stdout.upper() and "{" not in text.stdout
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").held(
        "already recorded", f"`python {PROGRAM} resume --state-dir {ws.state}` rewrites it"
    )
    ws.run("resume").ok()
    assert ws.run("verify").ok()["ok"] is True


# --- revisions -----------------------------------------------------------------------------------------


@BOTH
def test_revise_makes_new_versions_keeps_history_and_binds_decisions(ws):
    started = ws.start().ok()
    h1 = started["interrupt"][0]["resultsSha256"]
    rows = ws.db_rows()

    v2 = revise(ws).ok()
    assert v2["draftVersion"] == 2 and v2["itemId"] == "alpha" and v2["previousResultsSha256"] == h1
    h2 = v2["resultsSha256"]
    assert h2 != h1 and f"--results-sha256 {h2}" in v2["decideCommand"]

    v3 = revise(ws, "beta", "Beta has one unresolved field.", None, "sam", "shorter").ok()  # keeps beta's citations
    h3 = v3["resultsSha256"]
    assert v3["draftVersion"] == 3 and v3["previousResultsSha256"] == h2 and h3 not in (h1, h2)
    assert ws.db_rows() == rows  # never a model call

    inspected = ws.run("inspect").ok()
    assert inspected["draftVersion"] == 3 and inspected["resultsSha256"] == h3
    alpha, beta = inspected["results"]
    assert alpha["summary"] == REVISED_SUMMARY.strip() and alpha["citations"] == REVISED_CITATIONS
    assert alpha["status"] == "validated" and alpha["sourceSha256"] == sha256(ALPHA)
    assert alpha["revision"]["draftVersion"] == 2 and alpha["revision"]["reviewer"] == "rita"
    assert beta["summary"] == "Beta has one unresolved field." and beta["citations"][0]["quote"] == BETA.splitlines()[0]
    history = inspected["drafts"]
    assert [(d["version"], d["itemId"], d["reviewer"], d["reason"]) for d in history] == [
        (2, "alpha", "rita", "clearer wording"),
        (3, "beta", "sam", "shorter"),
    ]
    assert [d["resultsSha256"] for d in history] == [h2, h3]
    assert [d["previousResultsSha256"] for d in history] == [h1, h2]
    assert history[0]["change"]["before"]["summary"] == ALPHA.splitlines()[0]
    assert history[0]["change"]["after"]["summary"] == REVISED_SUMMARY.strip()
    assert inspected["decideCommand"].endswith(f"--results-sha256 {h3}")

    # decisions bound to older versions are refused; the current one is accepted
    for old in (h1, h2):
        decide(ws, digest=old).held("stale: results changed since review, now " + h3)
    final = decide(ws, digest=h3).ok()["final"]
    assert final["draftVersion"] == 3 and final["resultsSha256"] == h3 and final["bound"] is True
    receipt = ws.receipt()
    assert receipt["draftVersion"] == 3 and receipt["resultsSha256"] == h3
    revise(ws).held("Final decision already recorded")


def test_reverting_a_revision_is_a_new_version_with_a_new_hash(ws):
    """Editing an item back to the model's words is still version n+1: a decision bound to v1 is stale."""
    h1 = ws.start().ok()["interrupt"][0]["resultsSha256"]
    revise(ws).ok()
    original = ws.run("inspect").ok()["drafts"][0]["change"]["before"]
    v3 = revise(ws, "alpha", original["summary"], original["citations"], "rita", "back to the model's words").ok()
    assert v3["draftVersion"] == 3 and v3["resultsSha256"] != h1
    decide(ws, digest=h1).held("stale")


def test_a_revision_that_changes_nothing_is_refused(ws):
    ws.start().ok()
    revise(ws).ok()
    before = ws.state_bytes()
    revise(ws).held("changes nothing")
    assert ws.state_bytes() == before


@pytest.mark.parametrize(
    "summary, citations, phrase",
    [
        ("ok summary", [{"quote": "NOT IN THE SOURCE AT ALL", "claim": "x"}], "not an exact substring"),
        ("ok summary", [{"quote": "Alpha repor", "claim": "11 characters"}], "not meaningful"),
        ("ok summary", [{"quote": "   Alpha report   ", "claim": "12 after stripping"}], "not an exact substring"),
        ("ok summary", [{"quote": "..............", "claim": "punctuation"}], "not meaningful"),
        ("ok summary", [{"quote": "Alpha report requires owner", "claim": ""}], "claim must be"),
        ("ok summary", [{"quote": "Alpha report requires owner", "claim": "c", "extra": 1}], "exactly quote and claim"),
        ("ok summary", [{"quote": "Alpha report requires owner", "claim": "c"}] * 4, "1-3 citations"),
        ("ok summary", [], "1-3 citations"),
        ("  \n", REVISED_CITATIONS, "summary must be"),
        ("x" * 501, REVISED_CITATIONS, "summary must be"),
        ("ok summary", "{not json", "not valid JSON"),
    ],
)
def test_revision_is_validated_exactly_like_model_output(ws, summary, citations, phrase):
    ws.start().ok()
    before = ws.state_bytes()
    revise(ws, "alpha", summary, citations).held(phrase)
    assert ws.state_bytes() == before


@BOTH
def test_revise_refuses_unknown_items_and_jobs_not_waiting(ws):
    ws.start().ok()
    revise(ws, item="gamma").held("No item 'gamma'", "alpha, beta")

    waiting = Workspace(os.path.join(ws.root, "crashed"))
    waiting.write_manifest()
    assert waiting.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    revise(waiting).held("Cannot revise yet", "UNCERTAIN_CALL alpha")


@BOTH
def test_revising_failed_items_lets_the_reviewer_accept(ws):
    started = ws.start(env={"DURABLE_JOB_FAKE_OUTPUT": "invalid-citation"}).ok()
    assert [r["status"] for r in started["results"]] == ["failed", "failed"]
    revise(ws, "alpha", "Alpha needs review.", None).held("no valid citations to keep", "--citations-file")
    revise(ws).ok()
    decide(ws).held("Cannot accept", "beta")
    beta = [{"quote": "Beta report has one unresolved field", "claim": "One field is open."}]
    h = revise(ws, "beta", "Beta has an open field.", beta).ok()["resultsSha256"]
    final = decide(ws, digest=h).ok()["final"]
    assert final["decision"] == "accept" and final["statuses"] == {"alpha": "validated", "beta": "validated"}


def test_revise_never_calls_the_provider(ws, provider):
    openai_workspace(ws, provider)
    ws.start().ok()
    sent = len(provider.requests())
    assert sent == 2
    revise(ws).ok()
    revise(ws, "beta", "Beta, shorter.", None).ok()
    assert len(provider.requests()) == sent and len(ws.db_rows()) == 2


# --- cancel ------------------------------------------------------------------------------------------


@BOTH
def test_cancel_at_review_is_terminal_and_everything_after_is_refused(ws):
    ws.start().ok()
    revise(ws).ok()
    cancelled = ws.run("cancel", "--reviewer", "olga", "--reason", "wrong quarter").ok()
    record = cancelled["cancelled"]
    assert record["reviewer"] == "olga" and record["reason"] == "wrong quarter" and record["pendingCalls"] == []
    before = ws.state_bytes()
    ws.run("resume").held("cancelled")
    ws.start().held("cancelled")
    revise(ws, summary="Another try at a summary.").held("cancelled")
    decide(ws, "hold").held("cancelled")
    ws.run("cancel", "--reviewer", "olga", "--reason", "again").held("already cancelled")
    assert ws.state_bytes() == before

    inspected = ws.run("inspect").ok()
    assert inspected["phase"] == "cancelled" and inspected["cancelled"] == record and inspected["final"] is None
    assert "decideCommand" not in inspected
    status = ws.run("status").ok()
    assert status["phase"] == "cancelled" and "decide" not in status["next"]

    receipt = ws.receipt()
    assert receipt["outcome"] == "cancelled" and receipt["draftVersion"] == 2
    assert receipt["reviewer"] == "olga" and receipt["reason"] == "wrong quarter"
    assert receipt["resultsSha256"] == inspected["resultsSha256"]


@BOTH
def test_cancel_after_a_decision_is_refused(ws):
    ws.start().ok()
    decide(ws, "reject").ok()
    before = ws.state_bytes()
    assert ws.receipt()["decision"] == "reject"
    ws.run("cancel", "--reviewer", "olga", "--reason", "late").held("Final decision already recorded")
    assert ws.state_bytes() == before


def test_cancel_with_a_pending_call_keeps_it_reconcilable_and_sends_nothing_new(ws, provider):
    """The provider fails beta's call (unknown outcome): cancel; the call stays visible and reconcilable."""
    openai_workspace(ws, provider)
    provider.behave(by_input={"Beta report": "500"})
    ws.start().held("beta")
    pending_key = [r[0] for r in ws.db_rows() if r[2] == "pending"][0]
    sent = len(provider.requests())

    record = ws.run("cancel", "--reviewer", "olga", "--reason", "provider incident").ok()["cancelled"]
    assert record["pendingCalls"] == [pending_key]
    receipt = json.load(open(os.path.join(ws.state, "receipt.json")))
    assert receipt["outcome"] == "cancelled" and receipt["cancel"]["pendingCalls"] == [pending_key]

    provider.behave("ok")
    ws.run("resume").held("cancelled")
    ws.start().held("cancelled")
    status = ws.run("status").ok()
    assert [c[2] for c in status["calls"]] == ["completed", "pending"]
    assert "cancelled" in status["next"] and f"reconcile --state-dir {ws.state} --operation-key {pending_key}" in status["next"]
    text = ws.run("status", "--text").stdout
    assert f"reconcile --state-dir {ws.state} --operation-key {pending_key}" in text

    response = write(ws, "response.json", {"outputText": '{"itemId": "beta"}', "responseId": "resp_from_dashboard"})
    done = ws.run(
        "reconcile",
        "--operation-key",
        pending_key,
        "--action",
        "complete",
        "--response-file",
        response,
        "--reviewer",
        "olga",
        "--reason",
        "billed per the usage page",
    ).ok()
    assert done["status"] == "completed"
    assert [c[2:4] for c in ws.run("status").ok()["calls"]] == [["completed", status["calls"][0][3]], ["completed", "resp_from_dashboard"]]
    ws.run("resume").held("cancelled")
    decide(ws, "hold").held("cancelled")
    assert len(provider.requests()) == sent  # nothing new was ever sent


@BOTH
def test_cancel_before_any_result_and_then_abandon_the_pending_call(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    key = ws.db_rows()[0][0]
    ws.run("cancel", "--reviewer", "olga", "--reason", "stop").ok()
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "olga", "--reason", "no usage").ok()
    ws.run("resume").held("cancelled")
    assert [(r[1], r[2]) for r in ws.db_rows()] == [("alpha", "abandoned")]
    receipt = ws.receipt()
    assert receipt["statuses"] == {} and receipt["outcome"] == "cancelled"


@BOTH
def test_cancel_before_the_first_checkpoint_is_terminal_and_verifiable(ws):
    """A job sealed but never run (killed right after the seal) can be cancelled like any other."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-seal"}).code == 93
    ws.run("cancel", "--reviewer", "olga", "--reason", "wrong sources").ok()
    assert ws.run("verify").ok()["ok"] is True
    assert ws.run("status").ok()["phase"] == "cancelled"
    ws.run("cancel", "--reviewer", "olga", "--reason", "again").held("already cancelled")
    ws.run("resume").held("cancelled", "Start a new job")
    assert ws.db_rows() == []


# --- receipt.json ------------------------------------------------------------------------------------


def test_receipt_binds_everything_a_later_reader_needs(ws):
    started = ws.start().ok()
    h2 = revise(ws).ok()["resultsSha256"]
    decide(ws, "accept", h2, "dana", "all quotes exact").ok()
    names = os.listdir(ws.state)
    assert not [n for n in names if n.endswith(".tmp")], names
    receipt = json.load(open(os.path.join(ws.state, "receipt.json")))
    job = ws.job()
    assert receipt["outcome"] == "decided" and receipt["jobId"] == "journey"
    assert receipt["manifestSha256"] == job["manifestSha256"] == started["interrupt"][0]["manifestSha256"]
    assert receipt["engineSha256"] == engine_digest() and receipt["release"] == dj.__version__ and receipt["version"] == dj.VERSION
    assert receipt["dependencies"] == job["dependencies"] and set(receipt["dependencies"]) == set(dj.DEPENDENCIES)
    assert receipt["resultsSha256"] == h2 and receipt["draftVersion"] == 2
    assert receipt["statuses"] == {"alpha": "validated", "beta": "validated"}
    assert (receipt["decision"], receipt["reviewer"], receipt["reason"], receipt["bound"]) == ("accept", "dana", "all quotes exact", True)
    assert receipt["decidedAtUtc"] == receipt["final"]["decidedAtUtc"] and receipt["writtenAtUtc"].endswith("Z")
    verified = ws.run("verify").ok()
    assert verified["ok"] is True


# --- the review page -----------------------------------------------------------------------------------

HOSTILE_FIRST = '<script>alert("owned")</script><img src="http://evil.example/p.png" onerror="alert(1)"> Alpha says hi'
HOSTILE = (
    HOSTILE_FIRST + "\n"
    '</pre><iframe src="https://evil.example/frame"></iframe><a href="https://evil.example/">click</a>'
    "<style>body{display:none}</style><link rel=stylesheet href=//evil.example/x.css>\n"
    "&amp; &lt;b&gt; not bold <!-- comment --> ]]> '\" <base href=https://evil.example/>\n"
)


class PageParser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text, self.ids = [], [], [], set()

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend((tag, k, v) for k, v in attrs)
        self.ids.update(v for k, v in attrs if k == "id")

    def handle_data(self, data):
        self.text.append(data)


def parse_page(path: str) -> PageParser:
    with open(path, encoding="utf-8") as fh:
        page = fh.read()
    parser = PageParser()
    parser.feed(page)
    parser.close()
    parser.raw = page
    parser.alltext = "".join(parser.text)
    return parser


def assert_self_contained_and_inert(page: PageParser, shown_endpoint: str = "") -> None:
    """`shown_endpoint`: the provider endpoint the page names as text beside each call (never as a link)."""
    assert "script" not in page.tags
    for tag in ("img", "iframe", "link", "base", "object", "embed", "form", "input", "svg", "video", "audio"):
        assert tag not in page.tags, tag
    assert page.tags.count("style") == 1  # the page's own stylesheet, in <head>
    for tag, key, value in page.attrs:
        assert not key.startswith("on"), (tag, key)
        assert key != "src", (tag, key, value)
        if key == "href":
            assert value.startswith("#") and value[1:] in page.ids, (tag, value)  # in-page links only
    page_own = re.sub(r"(https?:)?//evil\.example", "", page.raw)  # the hostile strings, shown as text
    if shown_endpoint:
        assert shown_endpoint in "".join(page.text)
        page_own = page_own.replace(shown_endpoint, "")
    assert "http://" not in page_own and "https://" not in page_own and "//" not in page_own.replace("://", "")
    csp = [v for t, k, v in page.attrs if t == "meta" and k == "content" and "default-src 'none'" in (v or "")]
    assert csp, "the page forbids every external load"


def test_a_review_page_that_cannot_be_written_or_would_overwrite_the_job_is_refused(ws):
    ws.start().ok()
    before = ws.state_bytes()
    folder = os.path.join(ws.root, "pages")
    os.makedirs(os.path.join(folder, "taken"))
    for target in (os.path.join(folder, "taken"), os.path.join(folder, "missing", "review.html")):
        line = ws.run("inspect", "--html", target).held(f"{target} cannot be written", "nothing was changed")
        assert "resume" not in line  # inspect changes nothing, so nothing needs resuming
    assert sorted(os.listdir(folder)) == ["taken"] and os.listdir(os.path.join(folder, "taken")) == []
    with open(ws.manifest, "rb") as fh:
        manifest_bytes = fh.read()
    for name in ("job.json", "effects.sqlite", "receipt.json", "review.html"):
        ws.run("inspect", "--html", os.path.join(ws.state, name)).held("inside the state directory", "somewhere else")
    for target in (ws.manifest, os.path.join(ws.src, "alpha.txt"), os.path.join(ws.src, "..", "src", "beta.txt")):
        ws.run("inspect", "--html", target).held("a file the job seals", "somewhere else")
    with open(ws.manifest, "rb") as fh:
        assert ws.state_bytes() == before and fh.read() == manifest_bytes
    assert ws.run("verify").ok()["ok"] is True


def test_review_page_escapes_a_hostile_source_and_shows_everything(ws):
    hostile_id = "<b>bold-id</b>"
    manifest = ws.manifest_dict(
        sources={"alpha": HOSTILE, "beta": BETA}, jobId="<i>job</i>", approvedBy="<u>owner</u>", model="<em>model</em>"
    )
    ws.write_manifest(manifest)
    ws.start().ok()
    revise(
        ws,
        "beta",
        "Beta <script>evil()</script> summary.",
        [{"quote": "Beta report has one unresolved field", "claim": "<img src=x onerror=alert(2)>"}],
        "<svg onload=alert(3)>",
        "reason <iframe src=//evil.example>",
    ).ok()
    page_path = os.path.join(ws.root, "review.html")
    out = ws.run("inspect", "--html", page_path).ok()
    assert out["html"] == page_path
    page = parse_page(page_path)
    assert_self_contained_and_inert(page)

    text = page.alltext
    # every hostile string is shown as text
    for literal in (
        HOSTILE_FIRST,
        '<a href="https://evil.example/">click</a>',
        "<i>job</i>",
        "<u>owner</u>",
        "<em>model</em>",
        "Beta <script>evil()</script> summary.",
        "<img src=x onerror=alert(2)>",
        "<svg onload=alert(3)>",
        "reason <iframe src=//evil.example>",
    ):
        assert literal in text, literal
    assert hostile_id not in page.tags
    # header and status, the decide command with the hash
    assert "awaiting-review" in text and out["resultsSha256"] in text
    assert out["decideCommand"] in text and "fake" in text
    # each cited quote highlighted, linked to its claim and back
    marks = [v for t, k, v in page.attrs if t == "mark" and k == "id"]
    assert len(marks) == 2
    for mark in marks:
        claim = "c" + mark[1:]
        assert ("a", "href", "#" + claim) in page.attrs and claim in page.ids and ("a", "href", "#" + mark) in page.attrs
    # the journal and the draft history
    for row in ws.db_rows("SELECT response_id, status FROM calls"):
        assert row[0] in text and row[1] in text
    assert "total 1" in text or "tokens" in text
    history = page.raw[page.raw.index("<h2>Drafts") :]
    history = history[: history.index("</section>")]
    assert "v2" in history and "rita" not in history and html.escape("<svg onload=alert(3)>") in history
    assert "STRUCTURAL FIXTURE ONLY: Beta report has one unresolved field." in history  # before → after
    assert html.escape("Beta <script>evil()</script> summary.") in history


def test_highlight_escapes_markup_before_between_inside_and_after_the_quotes():
    """Every slice of a source around its highlighted quotes is escaped: before the first quote, between two
    quotes, inside each, and after the last; the visible text is the source exactly, each quote marked once."""
    first, second = "first <s>quote</s> is here", "second <q>quote</q> is here"
    source = (
        f"<script>alert(0)</script><b>lead</b> {first} <img src=x onerror=alert(1)><i>between</i> "
        f"{second} <u>tail</u><iframe src=//evil.example></iframe>\n"
    )
    marked = dj.highlight(source, [{"quote": first, "claim": "c"}, {"quote": second, "claim": "c"}], 3)
    page = PageParser()
    page.feed(marked)
    page.close()
    assert set(page.tags) == {"mark", "a"} and page.tags.count("mark") == 2, page.tags
    assert "".join(page.text) == source
    assert ("mark", "id", "q3-0") in page.attrs and ("a", "href", "#c3-1") in page.attrs


def test_review_page_shows_failed_items_pending_calls_and_usage(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA, "beta": BETA, "gamma": GAMMA})
    provider.behave(by_input={"Beta report": "not-json", "Gamma report": "500"})
    ws.start().held("gamma")
    page_path = os.path.join(ws.root, "page.html")
    ws.run("inspect", "--html", page_path).ok()
    page = parse_page(page_path)
    assert_self_contained_and_inert(page, shown_endpoint=provider.base_url)
    text = page.alltext
    assert f"sent to {provider.base_url} by {ws.principal_label} {ws.principal()}" in text
    assert "Failed" in text and "not valid JSON" in text  # beta's reason
    key = [r[0] for r in ws.db_rows() if r[2] == "pending"][0]
    assert f"reconcile --state-dir {ws.state} --operation-key {key}" in text
    assert "uncertain-call" in text
    assert "input" in text and "output" in text  # usage from the provider


def png_pixels(path: str):
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into (width, height, rows)."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if kind == 1:
                line[x] = (line[x] + a) & 255
            elif kind == 2:
                line[x] = (line[x] + b) & 255
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i : i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def screenshot(page: str, png: str, tmp, size=(390, 844)) -> None:
    """The page file as Chromium draws it in a window of `size` CSS pixels, one device pixel each, scrollbars hidden.

    A browser of its own (Chromium's --screenshot, no chromedriver), not conftest's shared `phone`: the pixels read
    here are of a plain desktop window of exactly `size` (390×3200 too) at a pixel ratio of 1 with no scrollbar, where
    the phone is a 2× mobile emulation at 390×844 whose PNGs would be another size and layout."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    assert os.path.exists(chromium), "Debian's chromium is needed: apt-get install -y chromium (.ci/run does it)"
    argv = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={tmp}/chromium-profile",
        f"--screenshot={png}",
        f"--window-size={size[0]},{size[1]}",
        "file://" + page,
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)})
    assert proc.returncode == 0 and os.path.exists(png), proc.stderr[-2000:]


def test_review_page_renders_on_a_phone_screen_in_headless_chromium(tmp_path):
    """The demo job's page at 390x844: a real PNG of that size, not blank, with a highlighted quote."""
    ws = Workspace(tmp_path)
    ws.run("start", "--manifest", os.path.join(os.path.dirname(PROGRAM), "manifest.structural.json")).ok()
    page = str(tmp_path / "review.html")
    ws.run("inspect", "--html", page).ok()
    png = str(tmp_path / "review.png")
    screenshot(page, png, tmp_path)
    shutil.copyfile(png, "/tmp/review-demo.png")  # for a person to look at
    width, height, rows = png_pixels(png)
    assert (width, height) == (390, 844)
    pixels = [p for row in rows for p in row]
    colours = set(pixels)
    assert len(colours) > 50, "a blank or single-colour page"
    dark = sum(1 for p in pixels if sum(p) < 200)
    assert dark > 0.01 * len(pixels), "too little text on screen"
    assert any(abs(r - 0xFF) < 8 and abs(g - 0xE0) < 8 and abs(b - 0x66) < 8 for r, g, b in colours), (
        "the cited quote's highlight is visible on the first screen"
    )
    # nothing is wider than the phone: the right-most column stays background
    assert len({row[-1] for row in rows}) <= 3


# --- seal -------------------------------------------------------------------------------------------


def test_seal_writes_a_valid_manifest_that_starts(ws):
    folder = os.path.join(ws.root, "job")
    os.makedirs(os.path.join(folder, "docs"))
    for name, text in (("alpha", ALPHA), ("beta", BETA)):
        with open(os.path.join(folder, "docs", f"{name}.txt"), "w") as fh:
            fh.write(text)
    out = os.path.join(folder, "manifest.json")
    sealed = ws.run(
        "seal",
        "--out",
        out,
        "--job-id",
        "sealed-job",
        "--approved-by",
        "owner@example.test",
        "--mode",
        "openai",
        "--model",
        "gpt-test",
        "--provider-transfer-approved",
        "--max-model-calls",
        "3",
        "--max-attempts-per-item",
        "1",
        os.path.join(folder, "docs", "alpha.txt"),
        "job/docs/beta.txt",
    ).ok()
    with open(out, "rb") as fh:
        raw = fh.read()
    manifest = json.loads(raw)
    assert sealed["manifest"] == out and sealed["manifestSha256"] == sha256(raw)
    assert manifest == {
        "schemaVersion": 1,
        "jobId": "sealed-job",
        "approved": True,
        "approvedBy": "owner@example.test",
        "mode": "openai",
        "model": "gpt-test",
        "providerTransferApproved": True,
        "maxModelCalls": 3,
        "maxAttemptsPerItem": 1,
        "items": [
            {"id": "alpha", "path": "docs/alpha.txt", "sha256": sha256(ALPHA)},
            {"id": "beta", "path": "docs/beta.txt", "sha256": sha256(BETA)},
        ],
    }
    dj.check_manifest(manifest)

    # a fake-mode seal runs end to end
    fake = os.path.join(folder, "fake.json")
    ws.run(
        "seal",
        "--out",
        fake,
        "--job-id",
        "f",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        os.path.join(folder, "docs", "alpha.txt"),
    ).ok()
    started = ws.run("start", "--manifest", fake).ok()
    assert [r["status"] for r in started["results"]] == ["validated"]

    # never overwrite without --force
    ws.run(
        "seal",
        "--out",
        out,
        "--job-id",
        "x",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        os.path.join(folder, "docs", "alpha.txt"),
    ).held("exists", "--force")
    with open(out, "rb") as fh:
        assert fh.read() == raw
    ws.run(
        "seal",
        "--out",
        out,
        "--job-id",
        "x",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        "--force",
        os.path.join(folder, "docs", "alpha.txt"),
    ).ok()
    assert json.load(open(out))["jobId"] == "x"

    # two sources with the same file name in different folders get distinct ids
    for sub, text in (("a", ALPHA), ("b", BETA)):
        os.makedirs(os.path.join(folder, "docs", sub))
        with open(os.path.join(folder, "docs", sub, "report.txt"), "w") as fh:
            fh.write(text)
    twins = ws.run(
        "seal",
        "--out",
        os.path.join(folder, "twins.json"),
        "--job-id",
        "tw",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        "job/docs/a/report.txt",
        "job/docs/b/report.txt",
    ).ok()
    assert [(i["id"], i["path"]) for i in twins["items"]] == [
        ("docs/a/report", "docs/a/report.txt"),
        ("docs/b/report", "docs/b/report.txt"),
    ]
    with open(os.path.join(folder, "docs", "a", "report.md"), "w") as fh:
        fh.write(GAMMA)
    stems = ws.run(
        "seal",
        "--out",
        os.path.join(folder, "stems.json"),
        "--job-id",
        "st",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        "job/docs/a/report.txt",
        "job/docs/a/report.md",
    ).ok()
    assert [i["id"] for i in stems["items"]] == ["docs/a/report.txt", "docs/a/report.md"]

    text = ws.run(
        "seal",
        "--out",
        os.path.join(folder, "t.json"),
        "--job-id",
        "t",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        os.path.join(folder, "docs", "alpha.txt"),
        "--text",
    ).stdout
    assert "job t" in text and "docs/alpha.txt" in text and sha256(ALPHA) in text and "None" not in text


def test_seal_writes_sources_outside_the_folder_as_absolute_paths_and_inside_ones_relative(ws):
    """A file beside the manifest stays relative (the folder can move as a whole); one outside it is
    written absolute, as the article writes paths; a link inside the folder keeps its own name and is
    followed wherever it leads, so the job runs and still refuses changed bytes."""
    folder = os.path.join(ws.root, "job")
    inside = ws.write_source("../job/docs/alpha.txt", ALPHA)
    outside = ws.write_source("../shared/beta.txt", BETA)
    gamma = ws.write_source("../shared/gamma.txt", GAMMA)
    os.symlink(gamma, os.path.join(folder, "gamma.txt"))
    out = os.path.join(folder, "manifest.json")
    sealed = ws.run(
        "seal",
        "--out",
        out,
        "--job-id",
        "spread",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        inside,
        outside,
        os.path.join(folder, "gamma.txt"),
    ).ok()
    assert [(i["id"], i["path"]) for i in sealed["items"]] == [
        ("alpha", "docs/alpha.txt"),
        ("beta", os.path.join(ws.root, "shared", "beta.txt")),
        ("gamma", "gamma.txt"),
    ]
    out_run = ws.run("start", "--manifest", out).ok()
    assert [r["status"] for r in out_run["results"]] == ["validated"] * 3
    with open(gamma, "a") as fh:
        fh.write("changed after sealing\n")
    ws.run("resume").held("Source bound/hash/size failure: gamma")

    twins = [ws.write_source(f"../shared/{sub}/report.txt", text) for sub, text in (("a", ALPHA), ("b", BETA))]
    ids = [
        i["id"]
        for i in ws.run(
            "seal",
            "--out",
            os.path.join(folder, "twins.json"),
            "--job-id",
            "tw",
            "--approved-by",
            "o",
            "--mode",
            "fake",
            "--model",
            "m",
            *twins,
        ).ok()["items"]
    ]
    assert ids[0].endswith("shared/a/report") and ids[1].endswith("shared/b/report") and not any(i.startswith("/") for i in ids)


def test_seal_refuses_every_broken_source_rule(ws):
    folder = os.path.join(ws.root, "job")
    os.makedirs(folder)
    good = ws.write_source("../job/good.txt", ALPHA)
    big = ws.write_source("../job/big.txt", "x" * 3001)
    latin = ws.write_source("../job/latin.txt", b"caf\xe9 au lait, not UTF-8\n")
    link = os.path.join(folder, "link.txt")
    os.symlink("/dev/null", link)
    out = os.path.join(folder, "manifest.json")
    base = ["seal", "--out", out, "--job-id", "j", "--approved-by", "o", "--mode", "fake", "--model", "m"]
    ws.run(*base, big).held("Source bound/hash/size failure: big")
    ws.run(*base, latin).held("not strict UTF-8")
    ws.run(*base, link).held("not a regular file")  # a link is followed, and a device is never opened
    os.makedirs(os.path.join(folder, "sub"))
    ws.run(*base, os.path.join(folder, "sub")).held("not a regular file")
    ws.run(*base, os.path.join(folder, "missing.txt")).held(f"{folder}/missing.txt does not exist", "name an existing source file")
    ws.run(*base, good, good).held("named twice")
    ws.run(*base).held("seal needs 1 to 3 sources, got 0", "name source files")
    four = [ws.write_source(f"../job/four-{n}.txt", f"Source number {n} of four, each one valid.\n") for n in range(4)]
    ws.run(*base, *four).held("seal needs 1 to 3 sources, got 4")
    ws.run(*base, *four[:3], "--mcp-uri", "docs://alpha", "--mcp-command", "server").held("got 4")
    ws.run("seal", "--out", out, "--job-id", "j", "--approved-by", "o", "--mode", "openai", "--model", "m", good).held(
        "providerTransferApproved"
    )
    ws.run(*base, "--max-model-calls", "7", good).held("maxModelCalls")
    ws.run(*base, "--max-attempts-per-item", "3", good).held("maxAttemptsPerItem")
    ws.run("seal", "--out", out, "--job-id", "  ", "--approved-by", "o", "--mode", "fake", "--model", "m", good).held("jobId")
    assert not os.path.exists(out)


def test_seal_names_its_own_flags_and_the_size_of_a_file_over_the_limit(ws):
    """Sealing is done with flags: a refusal names the flag to add and, for a big file, its size and the limit."""
    folder = os.path.join(ws.root, "job")
    os.makedirs(folder)
    good = ws.write_source("../job/good.txt", ALPHA)
    big = ws.write_source("../job/big.txt", "x" * 4321)
    out = os.path.join(folder, "manifest.json")
    base = ["seal", "--out", out, "--job-id", "j", "--approved-by", "o", "--model", "m"]
    ws.run(*base, "--mode", "openai", good).held("ManifestError", "--mode openai needs --provider-transfer-approved")
    ws.run(*base, "--mode", "fake", big).held("Source bound/hash/size failure: big", "4321 bytes", "limit of 3000")
    ws.run(*base, "--mode", "fake", "--max-model-calls", "7", good).held(
        "--max-model-calls (the manifest's maxModelCalls) must be an integer from 1 to 6"
    )
    assert not os.path.exists(out)
    assert ws.run(*base, "--mode", "openai", "--provider-transfer-approved", good).ok()["items"][0]["id"] == "good"


# --- output: text on a terminal, JSON when piped ------------------------------------------------------


def test_text_summaries_are_readable_for_every_review_command(ws):
    started = ws.run("start", "--manifest", ws.manifest, "--text")
    assert started.code == 0 and started.json is None
    text = started.stdout
    assert "job journey" in text and "alpha" in text and "validated" in text and "next:" in text
    assert "--results-sha256" in text

    revised = revise(ws, "alpha", REVISED_SUMMARY, REVISED_CITATIONS, "rita", "clearer wording", "--text")
    assert revised.code == 0 and revised.json is None
    assert "draft 2" in revised.stdout and "alpha" in revised.stdout and "rita" in revised.stdout
    assert "--results-sha256" in revised.stdout and "None" not in revised.stdout

    inspected = ws.run("inspect", "--text").stdout
    assert "draft 2" in inspected and f"v2 alpha by rita (account {ws.principal()}): clearer wording" in inspected
    assert REVISED_SUMMARY.strip() in inspected and "awaiting-review" in inspected

    digest = ws.run("inspect").ok()["resultsSha256"]
    decided = ws.run("decide", "--decision", "hold", "--reviewer", "dana", "--reason", "wait", "--results-sha256", digest, "--text").stdout
    assert f"hold by dana (account {ws.principal()})" in decided and "bound to" in decided and "receipt" in decided

    other = Workspace(os.path.join(ws.root, "other"))
    other.write_manifest()
    assert other.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    status = other.run("status", "--text").stdout
    key = other.db_rows()[0][0]
    assert "pending" in status and f"reconcile --state-dir {other.state} --operation-key {key}" in status
    cancelled = other.run("cancel", "--reviewer", "olga", "--reason", "stop", "--text").stdout
    assert (
        f"cancelled by olga (account {ws.principal()})" in cancelled
        and "stop" in cancelled
        and key in cancelled
        and "reconcile" in cancelled
    )
    # the printed reconcile command, placeholders filled, works after cancel
    line = next(text for text in cancelled.splitlines() if "reconcile --state-dir" in text)
    reconcile = line[line.index(f"python {PROGRAM}") :]
    abandoned = paste(other, reconcile, **{"complete|abandon": "abandon", "YOU": "olga", "WHY": "no usage recorded"}).ok()
    assert abandoned["status"] == "abandoned"

    # --json forces JSON, the default when piped is JSON
    assert ws.run("inspect", "--json").ok()["resultsSha256"] == digest
    assert ws.run("inspect").ok()["resultsSha256"] == digest
    ws.run("inspect", "--json", "--text").held()


def run_on_terminal(ws: Workspace, *args, stderr_tty=True, env=None):
    """Run the CLI with stdout (and optionally stderr) on a pseudo-terminal, as a person would."""
    master, slave = pty.openpty()
    err_master, err_slave = pty.openpty() if stderr_tty else (None, None)
    argv = [sys.executable, PROGRAM, *args, "--state-dir", ws.state]
    proc = subprocess.Popen(
        argv, stdout=slave, stderr=err_slave if stderr_tty else subprocess.PIPE, env={**clean_env(), **ws.env, **(env or {})}, cwd=ws.root
    )
    os.close(slave)
    if err_slave is not None:
        os.close(err_slave)
    outputs = {master: b"", **({err_master: b""} if err_master else {})}
    open_fds = set(outputs)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [], 60)
        assert ready, "the command hung"
        for fd in ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if chunk:
                outputs[fd] += chunk
            else:
                open_fds.discard(fd)
                os.close(fd)
    code = proc.wait(timeout=60)
    err = outputs[err_master] if err_master else proc.stderr.read()
    return code, outputs[master].decode().replace("\r\n", "\n"), err.decode().replace("\r\n", "\n")


def test_on_a_terminal_commands_print_a_summary_and_progress(ws):
    code, out, err = run_on_terminal(ws, "start", "--manifest", ws.manifest)
    assert code == 0, err
    assert not out.lstrip().startswith("{") and "start: job journey" in out and "next:" in out
    assert "[journey] item alpha: model call" in err and "[journey] item beta: validated" in err

    code, out, _ = run_on_terminal(ws, "status")
    assert code == 0 and "completed" in out and not out.lstrip().startswith("{")
    code, out, _ = run_on_terminal(ws, "inspect", "--json")
    assert code == 0 and json.loads(out)["draftVersion"] == 1

    # stdout piped (a script), stderr a terminal: JSON on stdout, progress still shown
    other = Workspace(os.path.join(ws.root, "piped"))
    other.write_manifest()
    master, slave = pty.openpty()
    proc = subprocess.run(
        [sys.executable, PROGRAM, "start", "--manifest", other.manifest, "--state-dir", other.state],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=clean_env(),
        cwd=other.root,
        timeout=120,
    )
    os.close(slave)
    err = b""
    while select.select([master], [], [], 0.5)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    os.close(master)
    assert proc.returncode == 0 and json.loads(proc.stdout)["index"] == 2
    assert b"item alpha: model call" in err

    # fully piped: no progress noise on stderr
    third = Workspace(os.path.join(ws.root, "quiet"))
    third.write_manifest()
    result = third.start()
    assert result.ok() and result.stderr == ""


def test_progress_says_when_a_journaled_call_is_reused_not_made(ws):
    """After a crash once alpha's call was journaled, resume reuses it: the person must not read "model call"."""
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"}).code == 92
    (alpha_key,) = [key for key, item, status, _ in ws.db_rows() if item == "alpha" and status == "completed"]
    code, _, err = run_on_terminal(ws, "resume")
    assert code == 0, err
    assert "[journey] item alpha: reused the completed call in the journal (no new call)" in err
    assert "item alpha: model call" not in err
    (beta_key,) = [key for key, item, _, _ in ws.db_rows() if item == "beta"]
    assert f"[journey] item beta: model call {beta_key}" in err and alpha_key not in err


def test_a_cancel_whose_receipt_was_lost_is_finished_not_repeated(ws):
    """The cancel is recorded but its receipt never written (a crash in between): cancel again finishes it."""
    ws.start().ok()
    first = ws.run("cancel", "--reviewer", "olga", "--reason", "wrong sources").ok()["cancelled"]
    os.remove(os.path.join(ws.state, "receipt.json"))
    ws.run("verify").held("receipt")
    again = ws.run("cancel", "--reviewer", "someone-else", "--reason", "retry").ok()
    assert again["cancelled"] == first and again["receiptRepaired"] is True
    with open(os.path.join(ws.state, "receipt.json")) as fh:
        assert json.load(fh)["cancel"] == first
    assert ws.run("verify").ok()["ok"] is True


@BOTH
def test_a_repeated_decide_that_differs_in_anything_is_refused_and_only_the_same_one_is_answered(ws):
    """The article's own test: an accept, then the same accept with another reason, is refused (it is not a second tap of
    the first, whose reason it would silently drop); only the very same decide again answers the recorded decision."""
    ws.inprocess = False  # the program as a person runs it: its exit code and its standard error
    ws.start().ok()
    said = ("--decision", "accept", "--reviewer", "fixture-owner", "--reason", "Structural source checks inspected")
    final = ws.run("decide", *said).ok()["final"]
    before, receipt = ws.state_bytes(), ws.receipt()
    duplicate = ws.run("decide", *said[:-1], "duplicate")
    line = duplicate.held("Final decision already recorded", "accept by fixture-owner", final["decidedAtUtc"])
    assert 'reason "duplicate", recorded "Structural source checks inspected"' in line and "nothing was recorded" in line
    assert duplicate.stdout == ""
    for differs, why in (
        (("--reviewer", "someone-else"), 'reviewer "someone-else", recorded "fixture-owner"'),
        (("--decision", "reject"), 'decision "reject", recorded "accept"'),
        (("--results-sha256", "0" * 64), f'resultsSha256 "{"0" * 64}", recorded "{final["resultsSha256"]}"'),
    ):
        flags = dict(zip(said[::2], said[1::2]))
        flags.update(dict([differs]))
        ws.run("decide", *[x for pair in flags.items() for x in pair]).held("Final decision already recorded", why)
    # nothing recorded: every file of the state directory, or every row of the store, as it was
    assert ws.state_bytes() == before and ws.receipt() == receipt
    # the double tap: the same everything (with or without the results hash it was decided on) answers the recorded one
    for again in (said, (*said, "--results-sha256", final["resultsSha256"])):
        out = ws.run("decide", *again).ok()
        assert out["existing"] is True and out["final"] == final
    assert ws.state_bytes() == before


def test_another_reviewer_saying_word_for_word_what_one_decided_is_refused(tmp_path, store_url):
    """Two reviewers may decide: bob's decision stands, and carol's identical decide is not bob's second tap."""
    alice = Workspace(tmp_path / "alice", store=store_url)
    alice.write_manifest(jobId="two-reviewers", reviewers=["bob", "carol"])
    alice.start().ok()
    bob, carol = (Workspace(tmp_path / role, store=as_role(store_url, role)) for role in ("bob", "carol"))
    for person in (bob, carol):
        person.write_manifest(jobId="two-reviewers")
    said = ("--decision", "hold", "--reviewer", "Reviewer", "--reason", "needs a second look")
    final = bob.run("decide", *said).ok()["final"]
    before = alice.state_bytes()
    carol.run("decide", *said).held("Final decision already recorded", 'principal "carol", recorded "bob"')
    assert alice.state_bytes() == before
    again = bob.run("decide", *said).ok()  # bob's own second tap is answered
    assert again["existing"] is True and again["final"] == final
