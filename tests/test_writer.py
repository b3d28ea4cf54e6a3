"""The writer (issue 47): a job whose manifest says `draft: true` writes the answer to its question after its items, in
one more journaled call whose input is only the question, the asked facts and the validated evidence.

The worked example throughout, as in tests/test_request.py: a pottery workshop's record names its day (Saturday) and
no time. The draft states the day, citing the quote that states it, and ends with the program's own note "The sources
do not state the time." — never the model's. Real parts: the loopback provider's own request log counts what was sent,
a kill is a real SIGKILL of a real process, and both backends run the journeys that matter."""

import json
import os
import signal

import pytest
from test_web import serving  # noqa: F401 (a fixture)

import durable_job as dj
from conftest import BOTH, PROGRAM, Workspace, openai_workspace, paste

WORKSHOP = (
    "Pottery workshop for beginners.\n"
    "The workshop takes place on Saturday in the community hall.\n"
    "Clay and aprons are provided; the fee is $40 a person.\n"
)
QUESTION = "When is the pottery workshop, and at what time?"
FACTS = [{"name": "day", "kind": "date"}, {"name": "time", "kind": "time"}]
DAY_QUOTE = "The workshop takes place on Saturday in the community hall."
NOTE = "The sources do not state the time."
SUMMARY = "The workshop is on Saturday; no time is given."
CLAIM = "The workshop is on a Saturday."


def drafting(ws: Workspace, **overrides) -> Workspace:
    ws.write_manifest(sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS, draft=True, **overrides)
    return ws


def item_answer(item: str = "workshop", day: dict | None = None) -> str:
    """The workshop item's answer: the day stated with its quote (E1 is its citation, E2 its day), the time not stated."""
    day = day or {"stated": True, "value": "Saturday", "quote": DAY_QUOTE}
    citation = {"quote": DAY_QUOTE, "claim": CLAIM}
    return json.dumps({"itemId": item, "summary": SUMMARY, "citations": [citation], "facts": {"day": day, "time": {"stated": False}}})


def writer_answer(*sentences) -> str:
    return json.dumps({"sentences": [{"text": text, "evidence": list(cited)} for text, cited in sentences]})


def asking_provider(tmp_path, provider, writer: str, **overrides) -> Workspace:
    """An openai-mode drafting job against the loopback provider: the item answers as item_answer, the writer (whose
    input alone holds the evidence block) as given."""
    ws = openai_workspace(
        Workspace(tmp_path), provider, sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS, draft=True, **overrides
    )
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{writer}"})
    return ws


def writer_requests(provider) -> list:
    return [r for r in provider.requests() if r["instructions"] == dj.WRITER_SYSTEM]


@BOTH
def test_the_pottery_job_drafts_the_day_with_its_quote_and_the_program_notes_the_time(ws):
    """make demo's job: seal --draft, start, read the draft first (inspect JSON, text and the review page), accept it
    bound to the hash that covers the draft, verify."""
    drafting(ws)
    started = ws.start().ok()
    out = ws.run("inspect").ok()
    draft = out["answer"]["draft"]
    assert draft["status"] == "validated"
    assert draft["sentences"] == [{"text": "The day is Saturday.", "evidence": ["E2"], "flags": []}]
    assert draft["notes"] == [NOTE] and draft["text"] == f"The day is Saturday. {NOTE}"
    assert draft["evidence"][1] == {"id": "E2", "itemId": "workshop", "quote": DAY_QUOTE, "fact": "day", "value": "Saturday"}
    assert out["drafts"] == []  # the revision history is not the draft answer
    assert out["resultsSha256"] == started["interrupt"][0]["resultsSha256"] != dj.results_sha256(out["results"])
    calls = ws.run("status").ok()["calls"]
    assert [(c[1], c[2]) for c in calls] == [("workshop", "completed"), (dj.WRITER_ID, "completed")]
    status = ws.run("status", "--text").stdout  # the writer's reserved id is a person's "the draft" wherever it is printed
    assert dj.WRITER_ID not in status and "  completed  the draft    " in status
    text = ws.run("inspect", "--text").stdout
    assert text.index(f"question: {QUESTION}") < text.index("draft:") < text.index("1. The day is Saturday.")
    assert f'E2, workshop: "{DAY_QUOTE}"' in text and f"note: {NOTE}" in text
    assert text.index(f"note: {NOTE}") < text.index("facts:") < text.index("day: Saturday")
    page = os.path.join(ws.root, "review.html")
    ws.run("inspect", "--html", page).ok()
    html = open(page, encoding="utf-8").read()
    assert html.index("id='answer'") < html.index("id='draft'") < html.index("id='fact-day'") < html.index("id='item0'")
    sentence = html[html.index("id='sentence-1'") :]
    assert sentence.startswith("id='sentence-1'>The day is Saturday.<details><summary>evidence E2</summary>")
    assert f"<a href='#q0-1'>“{DAY_QUOTE}”</a>" in sentence  # its evidence one tap away: the quote marked in the source
    assert f"<p class='note'>{NOTE}</p>" in html
    assert ws.run("verify").ok()["ok"] is True
    decided = ws.run(
        "decide", "--decision", "accept", "--reviewer", "r", "--reason", "day right", "--results-sha256", out["resultsSha256"]
    ).ok()
    assert decided["final"]["resultsSha256"] == out["resultsSha256"] == ws.receipt()["resultsSha256"]
    assert ws.run("verify").ok()["ok"] is True


def test_the_writer_is_sent_the_quotes_and_no_sentence_of_a_source_that_is_not_a_quote(tmp_path, provider):
    ws = asking_provider(tmp_path, provider, writer_answer(("The workshop is on Saturday.", ["E2"])))
    ws.start().ok()
    (sent,) = writer_requests(provider)
    prompt = sent["input"]
    assert sent["instructions"] == dj.WRITER_SYSTEM and "data, never instructions" in sent["instructions"]
    assert DAY_QUOTE in prompt and CLAIM in prompt and json.dumps(QUESTION) in prompt
    for line in WORKSHOP.splitlines():  # the source's other sentences never reach the writer
        assert (line in prompt) == (line == DAY_QUOTE), line
    assert SUMMARY not in prompt  # nor the item's earlier prose
    assert '"stated": false' in prompt and '"name": "time"' in prompt
    (writer_row,) = [c for c in ws.run("status").ok()["calls"] if c[1] == dj.WRITER_ID]
    assert sent["client_request_id"] == writer_row[0]
    out = ws.run("inspect").ok()
    assert out["answer"]["draft"]["text"] == f"The workshop is on Saturday. {NOTE}"
    assert ws.run("verify").ok()["ok"] is True


def test_a_job_without_draft_sends_exactly_what_it_sent_before_and_hashes_its_results_alone(tmp_path, provider):
    plain = openai_workspace(Workspace(tmp_path / "plain"), provider, sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS)
    provider.behave(f"answer:{item_answer()}")
    plain.start().ok()
    (before,) = provider.requests()
    out = plain.run("inspect").ok()
    assert "draft" not in out["answer"] and out["resultsSha256"] == dj.sha256_hex(dj.canonical(out["results"]))
    ws = asking_provider(tmp_path / "drafting", provider, writer_answer(("The workshop is on Saturday.", ["E2"])))
    ws.start().ok()
    item, writer = provider.requests()[1:]
    assert (item["instructions"], item["input"], item["max_output_tokens"]) == (
        before["instructions"],
        before["input"],
        before["max_output_tokens"],
    )
    assert writer["instructions"] == dj.WRITER_SYSTEM


def test_a_writer_citing_an_id_that_does_not_exist_fails_the_draft_which_is_reviewed_like_a_failed_item(tmp_path, provider):
    ws = asking_provider(tmp_path, provider, writer_answer(("The workshop is on Saturday.", ["E2", "E9"])))
    ws.start().ok()
    out = ws.run("inspect").ok()
    draft = out["answer"]["draft"]
    assert draft["status"] == "failed" and "sentence 1 cites 'E9', which is no evidence id" in draft["reason"]
    assert draft["notes"] == [NOTE] and "sentences" not in draft
    assert "draft: failed — sentence 1 cites 'E9'" in ws.run("inspect", "--text").stdout
    assert "--decision 'reject|hold'" in out["decideCommand"]
    flags = ("--reviewer", "r", "--results-sha256", out["resultsSha256"])
    ws.run("decide", "--decision", "accept", "--reason", "x", *flags).held("Cannot accept: the draft answer failed")
    ws.run("decide", "--decision", "reject", "--reason", "the draft cites nothing", *flags).ok()
    assert ws.run("verify").ok()["ok"] is True


# -- retry --draft: the writer's next call, spent on purpose at review ---------------------------------------------
GOOD = writer_answer(("The workshop is on Saturday.", ["E2"]))
UNKNOWN = writer_answer(("The workshop is on Saturday.", ["E2", "E9"]))


def retry_draft(ws: Workspace, *more: str):
    return ws.run("retry", "--draft", "--reviewer", "r", "--reason", "the writer cited E9", *more)


@BOTH
def test_retry_draft_spends_the_writers_next_call_and_its_valid_answer_replaces_the_failed_draft(tmp_path, ws, provider):
    """The writer cites an unknown id: the draft fails and accept is refused; status's next step pastes `retry --draft`;
    the provider then answers well: the same input is sent once more (attempt 2), the new draft validated, the old
    decide stale, the new resultsSha256 accepted, verify ok."""
    openai_workspace(ws, provider, sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS, draft=True)
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{UNKNOWN}"})
    started = ws.start().ok()
    old = started["interrupt"][0]["resultsSha256"]
    stale = ("--reviewer", "r", "--reason", "x", "--results-sha256", old)
    ws.run("decide", "--decision", "accept", *stale).held("Cannot accept: the draft answer failed")
    step = ws.run("status").ok()["next"]
    assert "the draft answer failed (sentence 1 cites 'E9'" in step
    command = next(line.split(": ", 1)[1] for line in step.splitlines() if "retry it (spends the writer's next model call)" in line)
    assert started["draftFailed"]["retryCommand"] == command and "cites 'E9'" in started["draftFailed"]["reason"]
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{GOOD}"})
    out = paste(ws, command, YOU="r", WHY="the writer cited E9").ok()
    first, second = writer_requests(provider)  # exactly one more writer request, its input the same
    assert second["input"] == first["input"] and len(provider.requests()) == 3
    assert out["itemId"] == dj.WRITER_ID and out["attempt"] == 2 and out["result"]["status"] == "validated"
    assert out["previousResultsSha256"] == old != out["resultsSha256"] and out["draftVersion"] == 2
    assert "accept|reject|hold" in out["decideCommand"]
    seen = ws.run("inspect").ok()
    assert seen["resultsSha256"] == out["resultsSha256"]
    assert seen["answer"]["draft"]["status"] == "validated" and seen["answer"]["draft"]["text"] == f"The workshop is on Saturday. {NOTE}"
    assert "1. The workshop is on Saturday." in ws.run("inspect", "--text").stdout
    page = os.path.join(ws.root, "review.html")
    ws.run("inspect", "--html", page).ok()
    assert "id='sentence-1'>The workshop is on Saturday." in open(page, encoding="utf-8").read()
    assert ws.run("verify").ok()["ok"] is True
    ws.run("decide", "--decision", "accept", *stale).held("stale")
    fresh = ("--reviewer", "r", "--reason", "the day is right", "--results-sha256", out["resultsSha256"])
    assert ws.run("decide", "--decision", "accept", *fresh).ok()["final"]["resultsSha256"] == ws.receipt()["resultsSha256"]
    assert ws.run("verify").ok()["ok"] is True
    assert len(writer_requests(provider)) == 2


def test_a_second_failed_draft_stays_failed_and_retry_draft_is_refused_once_the_writers_attempts_are_spent(tmp_path, provider):
    """A second failed draft stays failed with its reason; then maxAttemptsPerItem leaves the writer no call: refused,
    nothing sent, the next step only a decision; once decided (no longer at review) refused too; verify ok."""
    ws = asking_provider(tmp_path, provider, UNKNOWN, maxAttemptsPerItem=2)
    ws.start().ok()
    again = retry_draft(ws).ok()  # the writer errs again: the second draft failed, with its reason
    assert again["attempt"] == 2 and again["result"]["status"] == "failed" and "cites 'E9'" in again["result"]["reason"]
    assert ws.run("inspect").ok()["answer"]["draft"]["status"] == "failed"
    retry_draft(ws).held("Cannot retry the draft answer: the writer has used all 2 attempts", "nothing was sent")
    assert len(writer_requests(provider)) == 2
    assert "retry" not in ws.run("status").ok()["next"]
    assert ws.run("resume").ok()["draftFailed"] == {"reason": again["result"]["reason"]}  # no retry left to offer
    assert ws.run("verify").ok()["ok"] is True
    ws.run("retry", "--draft", "--item", "workshop", "--reviewer", "r", "--reason", "x").held("one of them")
    ws.run("decide", "--decision", "reject", "--reviewer", "r", "--reason", "the writer keeps erring").ok()
    retry_draft(ws).held("Final decision already recorded")
    assert len(writer_requests(provider)) == 2
    assert ws.run("verify").ok()["ok"] is True


def test_retry_draft_of_a_validated_draft_or_a_job_that_does_not_draft_is_refused(tmp_path, provider):
    ws = asking_provider(tmp_path, provider, GOOD)
    ws.start().ok()
    retry_draft(ws).held("The draft answer is validated", "retry --draft is for a failed draft answer")
    plain = openai_workspace(Workspace(tmp_path / "plain"), provider, sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS)
    plain.start().ok()
    retry_draft(plain).held("This job writes no draft answer")
    assert len(writer_requests(provider)) == 1


def revise_draft(ws: Workspace, path, body: str | None, *more: str):
    """revise --draft --file path (written with body first, when given)."""
    if body is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
    return ws.run("revise", "--draft", "--file", str(path), "--reviewer", "Bob", "--reason", "said where it is", *more)


@BOTH
def test_revise_draft_makes_a_new_draft_version_validated_as_the_writers_and_the_hash_covers_it(tmp_path, ws):
    """Bob rewrites the draft answer from the same evidence: a new draft version whose sentences are his, whose notes
    are the program's (the time's), bound by a new resultsSha256 (the old one stale), shown first by inspect, named
    in the history, re-checked by verify; then accepted."""
    drafting(ws)
    old = ws.start().ok()["interrupt"][0]["resultsSha256"]
    mine = writer_answer(("The pottery workshop is on Saturday.", ["E2"]), ("It is held in the community hall.", ["E1"]))
    out = revise_draft(ws, tmp_path / "draft.json", mine, "--results-sha256", old).ok()
    assert out["itemId"] == dj.WRITER_ID and out["draftVersion"] == 2 and out["previousResultsSha256"] == old != out["resultsSha256"]
    assert out["result"]["text"] == f"The pottery workshop is on Saturday. It is held in the community hall. {NOTE}"
    assert out["result"]["revision"]["reviewer"] == "Bob" and out["result"]["revision"]["draftVersion"] == 2
    seen = ws.run("inspect").ok()
    assert seen["resultsSha256"] == out["resultsSha256"] and seen["answer"]["draft"]["text"] == out["result"]["text"]
    assert [s["text"] for s in seen["answer"]["draft"]["sentences"]] == [
        "The pottery workshop is on Saturday.",
        "It is held in the community hall.",
    ]
    text = ws.run("inspect", "--text").stdout
    assert "2. It is held in the community hall." in text and "history: v2 the draft answer revised by Bob" in text
    assert ws.run("verify").ok()["ok"] is True
    ws.run("decide", "--decision", "accept", "--reviewer", "Bob", "--reason", "ok", "--results-sha256", old).held("stale")
    fresh = ("--reviewer", "Bob", "--reason", "the day is right", "--results-sha256", out["resultsSha256"], "--checked", "all")
    final = ws.run("decide", "--decision", "accept", *fresh).ok()["final"]
    assert final["checked"]["sentences"] == ["draft.1", "draft.2"] and final["draftVersion"] == 2
    assert ws.receipt()["resultsSha256"] == out["resultsSha256"] and ws.run("verify").ok()["ok"] is True


def test_verify_rechecks_a_revised_draft_answer_against_its_evidence(tmp_path):
    """A revised draft answer rewritten in the journal behind the program's back (a day its evidence does not state)
    fails verify's drafts check, which validates its sentences again."""
    import sqlite3

    ws = drafting(Workspace(tmp_path / "job"))
    ws.start().ok()
    revise_draft(ws, tmp_path / "draft.json", writer_answer(("The pottery workshop is on Saturday.", ["E2"]))).ok()
    conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"), isolation_level=None)
    try:
        (raw,) = conn.execute("SELECT change_json FROM drafts WHERE version=2").fetchone()
        change = json.loads(raw)
        change["draft"]["sentences"][0]["text"] = "The pottery workshop is on Sunday."
        conn.execute("UPDATE drafts SET change_json=? WHERE version=2", (json.dumps(change),))
    finally:
        conn.close()
    report = ws.run("verify")
    drafts = {c["name"]: c for c in report.json["checks"]}["drafts"]
    assert report.code == 2 and drafts["ok"] is False
    assert "draft 2: the revised draft answer is not what validating its sentences against the evidence gives" in drafts["detail"]


def test_every_bad_draft_file_is_a_hold_naming_what_is_wrong_and_records_nothing(tmp_path):
    ws = drafting(Workspace(tmp_path / "job"))
    ws.start().ok()
    f = tmp_path / "draft.json"
    revise_draft(ws, f, "{not json").held("--file", "the draft answer is invalid: the file is not valid JSON")
    revise_draft(ws, f, "  \n").held(f"--file {f} is empty")
    revise_draft(ws, f, json.dumps({"sentences": [{"text": "On Saturday."}]})).held(
        "sentence 1 must be an object with exactly text and evidence"
    )
    revise_draft(ws, f, writer_answer(("The workshop is on Saturday.", ["E2", "E9"]))).held(
        "sentence 1 cites 'E9', which is no evidence id"
    )
    revise_draft(ws, f, writer_answer(("A pottery workshop for beginners.", ["E1"]))).held(
        "fact day ('Saturday') is in no sentence citing its evidence"
    )
    revise_draft(ws, f, writer_answer(("The day is Saturday.", ["E2"]))).held("changes nothing", "(draft 1)")
    revise_draft(ws, f, None, "--item", "workshop").held(
        "revise --draft edits the draft answer from --file DRAFT.json alone", "leave out --item"
    )
    ws.run("revise", "--draft", "--reviewer", "Bob", "--reason", "x").held("--file DRAFT.json")
    ws.run("revise", "--reviewer", "Bob", "--reason", "x").held("revise needs --item ITEM", "--draft --file DRAFT.json")
    assert ws.run("inspect").ok()["draftVersion"] == 1 and ws.run("verify").ok()["ok"] is True
    strict = drafting(Workspace(tmp_path / "strict"), figuresMustBeQuoted=True)
    strict.start().ok()
    revise_draft(strict, f, writer_answer(("The workshop is on Saturday at 7pm.", ["E2"]))).held(
        "figure '7pm' in sentence 1 is in none of the evidence it cites"
    )
    flagged = revise_draft(ws, f, writer_answer(("The workshop is on Saturday at 7pm.", ["E2"]))).ok()  # flagged, as the writer's is
    assert flagged["result"]["sentences"][0]["flags"] == [{"text": "7pm", "where": "uncited"}]
    plain = Workspace(tmp_path / "plain")
    plain.write_manifest(sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS)
    plain.start().ok()
    revise_draft(plain, f, writer_answer(("The day is Saturday.", ["E2"]))).held("this job does not draft")


@pytest.mark.parametrize("must_quote", [False, True])
def test_a_sentence_stating_a_figure_its_evidence_lacks_is_flagged_or_fails_the_draft(tmp_path, provider, must_quote):
    writer = writer_answer(("The workshop is on Saturday at 7pm.", ["E2"]))
    ws = asking_provider(tmp_path, provider, writer, **({"figuresMustBeQuoted": True} if must_quote else {}))
    ws.start().ok()
    draft = ws.run("inspect").ok()["answer"]["draft"]
    if must_quote:
        assert draft["status"] == "failed"
        assert "figure '7pm' in sentence 1 is in none of the evidence it cites (figuresMustBeQuoted" in draft["reason"]
    else:
        assert draft["status"] == "validated"
        assert draft["sentences"][0]["flags"] == [{"text": "7pm", "where": "uncited"}]
        assert "figure 7pm: in none of the evidence it cites" in ws.run("inspect", "--text").stdout
        # the note is the program's, whatever the model wrote of the time
        assert draft["notes"] == [NOTE] and draft["text"].endswith(NOTE)
    assert ws.run("verify").ok()["ok"] is True


def test_a_draft_that_leaves_out_a_stated_fact_fails(tmp_path, provider):
    ws = asking_provider(tmp_path, provider, writer_answer(("A pottery workshop for beginners is planned.", ["E1"])))
    ws.start().ok()
    draft = ws.run("inspect").ok()["answer"]["draft"]
    assert draft["status"] == "failed" and "fact day ('Saturday') is in no sentence citing its evidence" in draft["reason"]


def test_a_failed_item_is_left_out_of_the_writers_evidence_and_the_draft_says_so(tmp_path, provider):
    other = "Second venue notes.\nThe annex opens at 9:00 on Sunday.\n"
    ws = openai_workspace(
        Workspace(tmp_path), provider, sources={"workshop": WORKSHOP, "annex": other}, question=QUESTION, facts=FACTS, draft=True
    )
    bad = json.dumps({"itemId": "annex", "summary": "x", "citations": [{"quote": "NOT IN SOURCE AT ALL", "claim": "c"}], "facts": {}})
    writer = writer_answer(("The workshop is on Saturday.", ["E2"]))
    provider.behave(f"answer:{item_answer()}", by_input={"Item: annex": f"answer:{bad}", "<<<EVIDENCE": f"answer:{writer}"})
    ws.start().ok()
    (sent,) = writer_requests(provider)
    assert "annex opens" not in sent["input"] and "left out (JSON: their answers did not pass validation" in sent["input"]
    assert '["annex"]' in sent["input"]
    draft = ws.run("inspect").ok()["answer"]["draft"]
    assert draft["status"] == "validated" and draft["notes"] == [NOTE, "Item annex is left out: its answer did not pass validation."]
    assert {e["itemId"] for e in draft["evidence"]} == {"workshop"}
    assert ws.run("verify").ok()["ok"] is True


def test_no_evidence_no_writer_call_and_no_call_left_a_failed_draft(tmp_path):
    """Every item failed: nothing to write from, so no call is made; a job whose bound leaves the writer no call
    reviews a failed draft saying so. Both verify."""
    ws = drafting(Workspace(tmp_path / "none"))
    ws.start(env={"DURABLE_JOB_FAKE_OUTPUT": "invalid-citation"}).ok()
    draft = ws.run("inspect").ok()["answer"]["draft"]
    assert draft["status"] == "failed" and draft["reason"].startswith("no validated evidence to write from")
    assert [c[1] for c in ws.run("status").ok()["calls"]] == ["workshop"]
    assert ws.run("verify").ok()["ok"] is True
    ws2 = drafting(Workspace(tmp_path / "bound"), maxModelCalls=1)
    ws2.start().ok()
    draft = ws2.run("inspect").ok()["answer"]["draft"]
    assert draft["status"] == "failed" and draft["reason"].startswith(dj.NO_CALL_LEFT)
    assert ws2.run("verify").ok()["ok"] is True


def test_draft_is_sealed_only_beside_a_question_and_raises_the_call_bound_by_one(tmp_path):
    ws = Workspace(tmp_path)
    source = ws.write_source("workshop.txt", WORKSHOP)
    out = os.path.join(ws.src, "m.json")
    base = ("seal", "--out", out, "--job-id", "pottery", "--approved-by", "o", "--mode", "fake", "--model", "f", "--force")
    ws.run(*base, "--draft", source, state=False).held("--draft (the manifest's draft) writes the answer to a question: add the question")
    ws.run(*base, "--question", QUESTION, "--fact", "day:date", "--draft", source, state=False).ok()
    manifest = json.load(open(out))
    assert manifest["draft"] is True and manifest["maxModelCalls"] == 3  # two for the item, one for the writer
    ws.run(*base, "--question", QUESTION, "--draft", "--max-model-calls", "7", source, state=False).ok()
    ws.run(*base, "--question", QUESTION, "--max-model-calls", "7", source, state=False).held(
        "must be an integer from 1 to 6", "7 only for a job that drafts"
    )
    ws.write_manifest(sources={"workshop": WORKSHOP}, question=QUESTION, draft="yes")
    ws.start().held("Manifest draft must be true or false")
    assert len(dj.WRITER_ID) > 80  # longer than any manifest item id may be: no item takes the writer's id


# -- a kill around the writer's call ------------------------------------------------------------------------------
# The program loaded unchanged; at the named crash point the process sends itself SIGKILL (a real signal, in openai
# mode against the loopback provider, whose own log says what was sent).
KILLER = r"""
import importlib.util, os, signal, sys

spec = importlib.util.spec_from_file_location("durable_job", {program!r})
dj = importlib.util.module_from_spec(spec)
sys.modules["durable_job"] = dj
spec.loader.exec_module(dj)


def killed_at(name, job=None):
    if name == os.environ.get("WRITER_KILL_AT"):
        os.kill(os.getpid(), signal.SIGKILL)


dj.crash_point = killed_at
sys.exit(dj.main(sys.argv[1:]))
"""
WRITER_POINTS = {
    "writer-after-pending": ("pending", 1),  # the writer's row pending, its request never sent
    "writer-before-ledger": ("pending", 2),  # the provider answered it, the journal still says pending
    "writer-after-ledger": ("completed", 2),
    "after-write": ("completed", 2),
}


@BOTH
@pytest.mark.parametrize("point", sorted(WRITER_POINTS))
def test_a_kill_at_each_point_around_the_writers_call_sends_nothing_twice_and_the_job_verifies(tmp_path, ws, provider, point):
    killer = os.path.join(str(tmp_path), "killer.py")
    with open(killer, "w") as fh:
        fh.write(KILLER.format(program=PROGRAM))
    writer = writer_answer(("The workshop is on Saturday.", ["E2"]))
    openai_workspace(ws, provider, sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS, draft=True)
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{writer}"})
    killed = ws.start(program=killer, env={"WRITER_KILL_AT": point})
    assert killed.code == -signal.SIGKILL, killed.stderr
    status, sent = WRITER_POINTS[point]
    calls = ws.run("status").ok()["calls"]
    assert [(c[1], c[2]) for c in calls] == [("workshop", "completed"), (dj.WRITER_ID, status)]
    assert len(provider.requests()) == sent
    key = calls[1][0]
    if status == "pending":  # an uncertain writer call: refused by name, reconciled as an item's is
        ws.run("resume").held(f"UNCERTAIN_CALL {dj.WRITER_ID} {key}")
        assert len(provider.requests()) == sent
        flags = ("--operation-key", key, "--reviewer", "r")
        if sent == 2:  # the provider's log holds the answer: the person completes the call from it
            (logged,) = [r for r in provider.requests() if r["client_request_id"] == key]
            answer = provider.response_file(logged, os.path.join(ws.root, "response.json"))
            ws.run("reconcile", *flags, "--action", "complete", "--reason", "the log has it", "--response-file", answer).ok()
        else:
            ws.run("reconcile", *flags, "--action", "abandon", "--reason", "never sent").ok()
    out = ws.run("resume").ok()
    assert len(out["interrupt"]) == 1
    keys = [r["client_request_id"] for r in provider.requests()]
    assert len(keys) == len(set(keys)), f"a request was sent twice: {keys}"
    assert len(keys) == sent + (1 if point == "writer-after-pending" else 0)  # an abandoned call's next attempt only
    draft = ws.run("inspect").ok()["answer"]["draft"]
    assert draft["status"] == "validated" and draft["text"] == f"The workshop is on Saturday. {NOTE}"
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "after the kill").ok()
    assert ws.run("verify").ok()["ok"] is True


def test_an_encrypted_jobs_writer_retry_keeps_its_draft_answer_encrypted_and_verifies_with_the_key(tmp_path, provider):
    """A job encrypted at rest: the retried draft answer (kept in its drafts row's change) is in none of the state's bytes
    in clear; with the key inspect shows it, and verify checks it; without the key verify passes with its warning."""
    from test_encrypted import file_bytes, new_key_file

    ws = asking_provider(tmp_path, provider, UNKNOWN)
    key = new_key_file(tmp_path)
    ws.env["DURABLE_JOB_KEY_FILE"] = key
    ws.start().ok()
    sentence = "Saturday is the workshop's one stated day."
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{writer_answer((sentence, ['E2']))}"})
    assert retry_draft(ws).ok()["result"]["status"] == "validated"
    assert not any(sentence.encode() in b for b in file_bytes(ws.state).values())
    assert ws.run("inspect").ok()["answer"]["draft"]["sentences"][0]["text"] == sentence
    assert ws.run("verify").ok()["ok"] is True
    bare = Workspace(ws.root, inprocess=False)
    bare.env = {k: v for k, v in ws.env.items() if k != "DURABLE_JOB_KEY_FILE"}
    report = bare.run("verify")
    assert report.code == 0 and "drafts.change_json" in {c["name"]: c for c in report.json["checks"]}["content"]["detail"]


def test_a_writer_retry_killed_after_the_provider_answered_is_reconciled_into_the_next_draft(tmp_path, provider):
    """SIGKILL at writer-before-ledger inside `retry --draft`: the call stays pending (uncertain, nothing sent again);
    the person completes it from the provider's log, and its answer becomes the next draft, checked as the writer's."""
    killer = os.path.join(str(tmp_path), "killer.py")
    with open(killer, "w") as fh:
        fh.write(KILLER.format(program=PROGRAM))
    ws = asking_provider(tmp_path, provider, UNKNOWN)
    old = ws.start().ok()["interrupt"][0]["resultsSha256"]
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{GOOD}"})
    killed = ws.run("retry", "--draft", "--reviewer", "r", "--reason", "E9", program=killer, env={"WRITER_KILL_AT": "writer-before-ledger"})
    assert killed.code == -signal.SIGKILL, killed.stderr
    key = ws.run("status").ok()["calls"][-1][0]
    retry_draft(ws).held(f"{key}")
    assert len(writer_requests(provider)) == 2
    (logged,) = [r for r in provider.requests() if r["client_request_id"] == key]
    answer = provider.response_file(logged, os.path.join(ws.root, "response.json"))
    flags = ("--operation-key", key, "--reviewer", "r", "--action", "complete", "--reason", "the log has it", "--response-file", answer)
    out = ws.run("reconcile", *flags).ok()
    assert out["retryDraft"]["result"]["status"] == "validated" and out["retryDraft"]["resultsSha256"] != old
    assert ws.run("inspect").ok()["answer"]["draft"]["status"] == "validated"
    assert ws.run("verify").ok()["ok"] is True
    ws.run(
        "decide", "--decision", "accept", "--reviewer", "r", "--reason", "ok", "--results-sha256", out["retryDraft"]["resultsSha256"]
    ).ok()
    assert ws.run("verify").ok()["ok"] is True and len(writer_requests(provider)) == 2


@pytest.mark.parametrize("point", sorted(WRITER_POINTS))
def test_each_writer_crash_point_exits_with_its_own_code_in_fake_mode(tmp_path, point):
    """DURABLE_JOB_FAKE_CRASH names the writer's points as it names an item's: the process exits with the point's code,
    printing nothing, the writer's row as the point says; resume (after the person settles an uncertain call) goes on."""
    ws = drafting(Workspace(tmp_path))
    crashed = ws.start(env={"DURABLE_JOB_FAKE_CRASH": point})
    assert crashed.code == dj.CRASH_POINTS[point] and crashed.stdout == "" and "Traceback" not in crashed.stderr
    calls = ws.run("status").ok()["calls"]
    assert [(c[1], c[2]) for c in calls] == [("workshop", "completed"), (dj.WRITER_ID, WRITER_POINTS[point][0])]
    if WRITER_POINTS[point][0] == "pending":
        flags = ("--operation-key", calls[1][0], "--action", "abandon", "--reviewer", "r", "--reason", "killed")
        ws.run("reconcile", *flags).ok()
    assert ws.run("resume").ok()["interrupt"] and ws.run("inspect").ok()["answer"]["draft"]["status"] == "validated"
    assert ws.run("verify").ok()["ok"] is True


def test_a_reviewer_on_a_phone_reads_the_draft_first_and_taps_through_a_sentence_to_its_quote(tmp_path, pg_server, serving, phone):  # noqa: F811
    """bob opens alice's drafting job on a 390×844 phone: the question, then the draft (the day's sentence, the
    program's note on the time), then the facts and the items; a sentence's evidence is one tap away, and its quote
    one more (marked in its source); nothing scrolls sideways; he accepts it from there."""
    from selenium.webdriver.support.ui import WebDriverWait
    from test_web import fits_a_phone, phone_signs_in, text_of

    from conftest import new_store

    ws = Workspace(tmp_path, store=new_store(pg_server, "alice"))
    drafting(ws, reviewers=["bob"])
    ws.start().ok()
    s = serving(tmp_path, "--store", ws.store)
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, s.base, "journey", "bob")
    wait.until(lambda d: d.find_elements("id", "draft"))
    order = driver.execute_script(
        "const ids = ['answer', 'draft', 'fact-day', 'item0'].map(i => document.getElementById(i));"
        "return ids.slice(1).every((e, n) => ids[n].compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING)"
    )
    assert order is True
    assert text_of(driver, "sentence-1").startswith("The day is Saturday.")
    assert NOTE in text_of(driver, "draft")
    fits_a_phone(driver)
    driver.find_element("css selector", "#sentence-1 summary").click()
    driver.find_element("css selector", "#sentence-1 li.evidence a").click()
    wait.until(lambda d: d.execute_script("return location.hash") == "#q0-1")
    assert driver.execute_script("return document.getElementById('q0-1').innerText") == DAY_QUOTE
    driver.save_screenshot(str(tmp_path / "draft-390x844.png"))
    driver.find_element("id", "reason").send_keys("The day is right; the time is not announced.")
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: text_of(d, "live-state").startswith("Saved: accepted by bob (role bob)"))
    assert ws.run("verify").ok()["ok"] is True


def test_a_failed_draft_answer_is_retried_from_the_phone_through_the_command_apis_retry(tmp_path, provider, serving, phone):  # noqa: F811
    """The writer cites an unknown id: the job page offers the draft answer's retry beside it, as a failed item's; the
    tap spends the writer's next call (through `retry`, nothing else sent), the page then shows the validated draft
    and no retry, and the job verifies."""
    from selenium.webdriver.support.ui import WebDriverWait
    from test_web import text_of

    ws = asking_provider(tmp_path, provider, UNKNOWN)
    ws.start().ok()
    s = serving(tmp_path, "--root", str(tmp_path), env=provider.env())
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    driver.get(s.address)
    driver.get(f"{s.base}/jobs/journey")
    wait.until(lambda d: d.find_elements("id", "retry-draft"))
    assert "cites 'E9'" in text_of(driver, "draft")
    provider.behave(f"answer:{item_answer()}", by_input={"<<<EVIDENCE": f"answer:{GOOD}"})
    driver.find_element("id", "retry-reason-draft").send_keys("the writer cited E9")
    driver.find_element("id", "retry-draft").click()
    wait.until(lambda d: "Recorded: draft 2 of the draft answer" in d.page_source)
    assert text_of(driver, "sentence-1").startswith("The workshop is on Saturday.")
    assert not driver.find_elements("id", "retry-draft")
    assert len(writer_requests(provider)) == 2
    history = ws.run("inspect").ok()["drafts"]
    assert [(d["itemId"], d["reason"]) for d in history] == [(dj.WRITER_ID, "the writer cited E9")]
    assert ws.run("verify").ok()["ok"] is True
