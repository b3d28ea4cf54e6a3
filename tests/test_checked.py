"""What the reviewer checked (issue 34), part two: claim by claim in the terminal. `decide --checked ITEM.N,…|all`
records, in the decision (so in its signature and the receipt), which claims the person checked against their quotes;
the manifest's reviewChecksEveryClaim refuses an accept until every claim is checked, naming those left."""

import json

from conftest import BOILER, BOTH, THREE, Workspace, allowed_signers, make_key, openai_workspace


def three_claims(ws: Workspace, provider, **manifest) -> str:
    """A job of one item with three claims, at review; its resultsSha256."""
    openai_workspace(ws, provider, sources={"alpha": BOILER}, **manifest)
    provider.behave(THREE)
    ws.start().ok()
    return ws.run("inspect").ok()["resultsSha256"]


def decide(ws: Workspace, *flags: str, decision: str = "accept"):
    return ws.run("decide", "--decision", decision, "--reviewer", "Bob", "--reason", "read every quote", *flags)


@BOTH
def test_checked_claims_are_recorded_in_the_decision_the_receipt_and_verify(ws, provider):
    digest = three_claims(ws, provider)
    final = decide(ws, "--checked", "alpha.3, alpha.1").ok()["final"]
    checked = {"claims": ["alpha.1", "alpha.3"], "of": 3, "resultsSha256": digest}
    assert final["checked"] == checked
    receipt = ws.receipt()
    assert receipt["checked"] == checked and receipt["final"]["checked"] == checked
    decision = {c["name"]: c for c in ws.run("verify").ok()["checks"]}["decision"]
    assert decision["ok"] and decision["detail"].endswith("checked 2 of 3 claims")
    assert "checked 2 of 3 claims: alpha.1, alpha.3" in ws.run("inspect", "--text").stdout
    again = decide(ws, "--checked", "alpha.1,alpha.3").ok()  # the same decide again: the recorded one
    assert again["existing"] and again["final"] == final
    decide(ws, "--checked", "all").held("DecisionError", "Final decision already recorded", "checked")


@BOTH
def test_a_bad_checked_entry_is_a_hold_naming_it_and_records_nothing(ws, provider):
    three_claims(ws, provider)
    decide(ws, "--checked", "alpha.1,alpha.4").held("UsageError", '--checked entry "alpha.4" names no claim', "alpha.1, alpha.2, alpha.3")
    decide(ws, "--checked", "beta.1").held("UsageError", '"beta.1"')
    decide(ws, "--checked", "").held("UsageError", '--checked entry ""')
    assert ws.run("status").ok()["phase"] == "awaiting-review"


@BOTH
def test_review_checks_every_claim_refuses_an_accept_naming_what_is_left(ws, provider):
    three_claims(ws, provider, reviewChecksEveryClaim=True)
    decide(ws, "--checked", "alpha.1,alpha.2").held("DecisionError", "Cannot accept", "not checked: alpha.3 (checked 2 of 3 claims)")
    decide(ws).held("DecisionError", "not checked: alpha.1, alpha.2, alpha.3")
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    final = decide(ws, "--checked", "all").ok()["final"]
    assert final["checked"]["claims"] == ["alpha.1", "alpha.2", "alpha.3"] and final["checked"]["of"] == 3


def test_review_checks_every_claim_leaves_reject_and_hold_free(ws, provider):
    three_claims(ws, provider, reviewChecksEveryClaim=True)
    assert decide(ws, decision="reject").ok()["final"]["decision"] == "reject"


def test_the_checked_claims_are_signed_and_a_receipt_alone_says_how_many(ws, provider, tmp_path):
    three_claims(ws, provider)
    key = make_key(tmp_path, "bob")
    decide(ws, "--checked", "alpha.2,alpha.3", "--sign-key", key).ok()
    receipt = ws.receipt()
    assert "checked" in receipt["final"]["signature"]["fields"]
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps(receipt))
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), key, ""))
    alone = Workspace(tmp_path / "elsewhere")
    report = alone.run("verify", "--receipt", str(kept), "--allowed-signers", signers, state=False).ok()
    assert report["verified"][0].endswith("checked 2 of 3 claims")
    assert "checked" not in report["unsigned"]
    edited = tmp_path / "edited.json"  # a receipt that says more was checked than was signed
    edited.write_text(json.dumps({**receipt, "checked": {**receipt["checked"], "claims": ["alpha.1", "alpha.2", "alpha.3"]}}))
    alone.run("verify", "--receipt", str(edited), "--allowed-signers", signers, state=False).held(
        "receipt was changed after it was signed", "checked"
    )


def asking(ws: Workspace, draft: bool = True, **manifest) -> str:
    """The pottery job of tests/test_writer.py in fake mode, at review: one claim (workshop.1), the draft answer's one
    sentence (draft.1), the asked facts day and time; its resultsSha256."""
    from test_writer import FACTS, QUESTION, WORKSHOP

    drafts = {"draft": True} if draft else {}
    ws.write_manifest(sources={"workshop": WORKSHOP}, question=QUESTION, facts=FACTS, **drafts, **manifest)
    ws.start().ok()
    return ws.run("inspect").ok()["resultsSha256"]


@BOTH
def test_a_drafting_jobs_checks_record_its_sentences_and_facts_and_verify_and_the_receipt_count_them(ws):
    digest = asking(ws)
    final = decide(ws, "--checked", "fact.time,workshop.1, draft.1").ok()["final"]
    checked = {
        "claims": ["workshop.1"],
        "of": 1,
        "resultsSha256": digest,
        "sentences": ["draft.1"],
        "sentencesOf": 1,
        "facts": ["fact.time"],
        "factsOf": 2,
    }
    assert final["checked"] == checked and ws.receipt()["checked"] == checked
    words = "checked 1 of 1 claim, 1 of 1 sentence, 1 of 2 facts"
    decision = {c["name"]: c for c in ws.run("verify").ok()["checks"]}["decision"]
    assert decision["ok"] and decision["detail"].endswith(words)
    assert f"{words}: workshop.1, draft.1, fact.time" in ws.run("inspect", "--text").stdout
    again = decide(ws, "--checked", "draft.1,workshop.1,fact.time").ok()  # the same decide again: the recorded one
    assert again["existing"] and again["final"] == final
    decide(ws, "--checked", "all").held("DecisionError", "Final decision already recorded", "checked")
    page = f"{ws.root}/review.html"
    ws.run("inspect", "--html", page).ok()
    with open(page, encoding="utf-8") as f:
        assert f"{words}: workshop.1, draft.1, fact.time" in f.read()


@BOTH
def test_a_drafting_jobs_bad_checked_entry_is_a_hold_naming_its_sentences_and_facts(ws):
    asking(ws)
    decide(ws, "--checked", "draft.2").held(
        "UsageError", '--checked entry "draft.2" names no claim or sentence or fact', "workshop.1, draft.1, fact.day, fact.time", "draft.N"
    )
    decide(ws, "--checked", "fact.place").held("UsageError", '"fact.place"', "fact.NAME")
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_review_checks_every_claim_of_a_drafting_job_asks_every_sentence_and_fact_too(ws):
    asking(ws, reviewChecksEveryClaim=True)
    decide(ws, "--checked", "workshop.1,fact.day").held(
        "DecisionError", "Cannot accept", "not checked: draft.1, fact.time (checked 1 of 1 claim, 0 of 1 sentence, 1 of 2 facts)"
    )
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    final = decide(ws, "--checked", "all").ok()["final"]
    assert (final["checked"]["sentences"], final["checked"]["facts"]) == (["draft.1"], ["fact.day", "fact.time"])
    assert ws.run("verify").ok()["ok"]


def test_a_job_that_asks_without_drafting_records_its_facts_and_no_sentences(ws):
    digest = asking(ws, draft=False)
    decide(ws, "--checked", "draft.1").held(
        "UsageError", "names no claim or fact", "give ITEM.N, N counting the item's citations from 1, fact.NAME, or all"
    )
    final = decide(ws, "--checked", "all").ok()["final"]
    assert final["checked"] == {
        "claims": ["workshop.1"],
        "of": 1,
        "resultsSha256": digest,
        "facts": ["fact.day", "fact.time"],
        "factsOf": 2,
    }
    decision = {c["name"]: c for c in ws.run("verify").ok()["checks"]}["decision"]
    assert decision["ok"] and decision["detail"].endswith("checked 1 of 1 claim, 2 of 2 facts")
