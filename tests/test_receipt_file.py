"""A receipt as a file (issue "Hostile roles", item 3): `inspect --receipt FILE` writes a job's receipt (a state
directory's or a store's) for whoever checks it elsewhere, and `verify --receipt FILE --allowed-signers F` with no job
checks every field the receipt reports against the signed decision: a top-level field that says otherwise fails,
naming the field and both values, and a field no signature covers is named as such, never reported as verified.

Real ed25519 keys made by ssh-keygen; every command a real process of the program.
"""

import json
import os

import pytest

from conftest import BOTH, NEW_RECEIPT_UNSIGNED, Workspace, allowed_signers, make_key


def signed_receipt_file(ws: Workspace, tmp_path) -> tuple[str, str, dict]:
    """Bob decides reject, signed; `inspect --receipt` writes the job's receipt to a file. (file, allowed_signers, receipt)"""
    bob = make_key(tmp_path, "bob")
    ws.start().ok()
    ws.run("decide", "--decision", "reject", "--reviewer", "Bob Reviewer", "--reason", "the quote is wrong", "--sign-key", bob).ok()
    path = str(tmp_path / "receipt-copy.json")
    assert ws.run("inspect", "--receipt", path).ok()["receiptFile"] == path
    with open(path) as fh:
        receipt = json.load(fh)
    assert receipt == ws.receipt()
    return path, allowed_signers(tmp_path, "signers", (ws.principal(), bob, "")), receipt


@pytest.fixture(scope="module")
def signed(tmp_path_factory) -> tuple[dict, str]:
    """One job of a state directory, decided (reject) and signed by Bob, for the tests that edit its receipt: (receipt, signers)."""
    root = tmp_path_factory.mktemp("signed")
    ws = Workspace(root / "job")
    ws.write_manifest()
    _, signers, receipt = signed_receipt_file(ws, root)
    return receipt, signers


def verify_alone(tmp_path, receipt, signers):
    """verify --receipt FILE --allowed-signers F by someone with nothing but the file and the public key."""
    path = tmp_path / "sent-receipt.json"
    path.write_text(json.dumps(receipt, indent=2))
    return Workspace(tmp_path / "elsewhere").run("verify", "--receipt", str(path), "--allowed-signers", signers, state=False)


def checks(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


@BOTH
def test_a_receipt_alone_says_which_decision_it_verified_and_which_fields_no_signature_covers(ws, tmp_path):
    path, signers, receipt = signed_receipt_file(ws, tmp_path)
    final = receipt["final"]
    report = Workspace(tmp_path / "elsewhere").run("verify", "--receipt", path, "--allowed-signers", signers, state=False)
    out = report.ok()
    said = f"decision reject by {ws.principal()} (Bob Reviewer) at {final['decidedAtUtc']}, results sha256 {final['resultsSha256']}"
    assert out["ok"] is True and out["verified"] == [said]
    assert checks(out)["decision"] == {"name": "decision", "ok": True, "detail": f"{said}, signed and verified"}
    tied = checks(out)["receipt fields"]
    assert tied["ok"] and tied["detail"].startswith("outcome, jobId, decision, reviewer, principal, reason, decidedAtUtc, bound")
    # the job's facts are in the signed record (tests/test_receipt_attacker.py edits each); what the receipt adds after the
    # act is named, in the document and in the check, and is a warning, not a verified field
    for field in ("owner", "manifestSha256", "engineSha256", "statuses", "endpoints"):
        assert field not in out["unsigned"] and field in final["signature"]["fields"] and f", {field}" in tied["detail"], field
    assert out["unsigned"] == NEW_RECEIPT_UNSIGNED
    uncovered = checks(out)["not covered"]
    assert uncovered["warning"] is True and uncovered["detail"].startswith("not covered by the signature")
    assert ", final.signature.namespace," in uncovered["detail"] and "writtenAtUtc" not in tied["detail"]
    assert (
        "warn not covered: not covered by the signature"
        in Workspace(tmp_path / "elsewhere").run("verify", "--receipt", path, "--allowed-signers", signers, "--text", state=False).stdout
    )


@pytest.mark.parametrize(
    "edit, field, ours",
    [
        ({"decision": "accept"}, "decision", '"accept"'),
        ({"reason": "all good"}, "reason", '"all good"'),
        ({"reviewer": "Mallory Boss"}, "reviewer", '"Mallory Boss"'),
        ({"principal": "mallory"}, "principal", '"mallory"'),
        ({"decidedAtUtc": "2026-01-01T00:00:00.000000Z"}, "decidedAtUtc", '"2026-01-01T00:00:00.000000Z"'),
        ({"resultsSha256": "0" * 64}, "resultsSha256", '"' + "0" * 64 + '"'),
        ({"draftVersion": 7}, "draftVersion", "7"),
        ({"bound": True}, "bound", "true"),
        ({"outcome": "cancelled"}, "outcome", '"cancelled"'),
    ],
)
def test_a_top_level_field_edited_against_the_signed_decision_fails_naming_it_and_both_values(signed, tmp_path, edit, field, ours):
    receipt, signers = signed
    signed = {"outcome": '"decided"', "bound": "false"}.get(field) or json.dumps(receipt["final"][field])
    out = verify_alone(tmp_path, {**receipt, **edit}, signers)
    line = out.held("receipt fields", f"{field} is {ours} in the receipt, {signed} in the signed decision")
    assert "the receipt was changed after it was signed" in line
    assert checks(out.json)["decision"]["ok"] is True and out.json["ok"] is False  # the signature holds; the receipt lies


@pytest.mark.parametrize(
    "key, inner, value",
    [
        ("writtenAtUtc", None, "2027-01-01T00:00:00.000000Z"),
        ("final", "signature", "signedAtUtc"),
    ],
)
def test_a_field_no_signature_covers_is_flagged_not_covered_and_never_reported_as_verified(signed, tmp_path, key, inner, value):
    """writtenAtUtc and the signature's own time are written after the decision was signed: an edit of one cannot be
    told from the receipt alone. verify says so by name, and its verified decision names none of them."""
    receipt, signers = signed
    if inner is None:
        edited, name = {**receipt, key: value}, key
    else:
        later = {**receipt[key][inner], value: "2027-01-01T00:00:00.000000Z"}
        edited, name = {**receipt, key: {**receipt[key], inner: later}}, f"{key}.{inner}.{value}"
    out = verify_alone(tmp_path, edited, signers).ok()
    assert name in out["unsigned"] and f" {name}," in checks(out)["not covered"]["detail"] + ","
    assert checks(out)["not covered"]["warning"] is True
    tied = checks(out)["receipt fields"]["detail"].split(": ")[0].split(", ")
    assert checks(out)["receipt fields"]["ok"] and name.split(".")[-1] not in tied and out["ok"] is True


def test_a_key_added_to_the_signed_decision_beyond_its_signatures_fields_is_named_not_covered(signed, tmp_path):
    """A new receipt's decision signs every key it has; a key set beside them afterwards (here a claim that the budget
    was approved) is no part of what was signed, and verify names it as not covered instead of passing it as signed."""
    receipt, signers = signed
    edited = {**receipt, "final": {**receipt["final"], "budgetApproved": True}}
    out = verify_alone(tmp_path, edited, signers).ok()
    assert "final.budgetApproved" in out["unsigned"], out["unsigned"]
    assert " final.budgetApproved," in checks(out)["not covered"]["detail"] + ","
    assert checks(out)["not covered"]["warning"] is True


def test_an_edit_the_signature_covers_fails_it_and_a_broken_receipt_is_one_hold_line(signed, tmp_path):
    receipt, signers = signed
    final = receipt["final"]
    for edited in (
        {**receipt, "final": {**final, "decision": "accept"}, "decision": "accept"},  # the signed record itself
        {**receipt, "jobId": "another-job"},  # the job the signature names
        {**receipt, "final": {**final, "signature": {**final["signature"], "fields": ["decision"]}}},
    ):
        verify_alone(tmp_path, edited, signers).held("decision", "does not verify")
    out = verify_alone(tmp_path, {**receipt, "final": {**final, "jobId": "another-job"}}, signers)
    out.held("receipt fields", 'final.jobId is "another-job" in the receipt')
    for broken, why in (
        ({**receipt, "final": {**final, "signature": "forged"}}, "not a signature record"),
        ({**receipt, "final": {**final, "principal": 7}}, "names no principal"),
        ({**receipt, "final": {**final, "signature": {**final["signature"], "fields": "decision"}}}, "names no list of the fields"),
        ({**receipt, "final": None}, "records no decision or cancel"),
        ({**receipt, "jobId": 5}, "not a durable_job receipt"),
    ):
        verify_alone(tmp_path, broken, signers).held(why)


@BOTH
def test_a_signed_cancel_alone_is_checked_the_same_way(ws, tmp_path):
    dana = make_key(tmp_path, "dana")
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    ws.run("cancel", "--reviewer", "Dana", "--reason", "wrong sources", "--sign-key", dana).ok()
    path = str(tmp_path / "cancel.json")
    ws.run("inspect", "--receipt", path).ok()
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), dana, ""))
    with open(path) as fh:
        receipt = json.load(fh)
    out = verify_alone(tmp_path, receipt, signers).ok()
    assert out["verified"] == [f"cancel by {ws.principal()} (Dana) at {receipt['cancel']['cancelledAtUtc']}"]
    assert "resultsSha256" in out["unsigned"]  # a cancel binds no results
    verify_alone(tmp_path, {**receipt, "decision": "accept"}, signers).held(
        'decision is "accept" in the receipt, null in the signed cancel'
    )
    verify_alone(tmp_path, {**receipt, "reason": "approved"}, signers).held('reason is "approved" in the receipt')


@BOTH
def test_inspect_writes_the_receipt_only_once_there_is_one_and_never_over_another_file(ws, tmp_path):
    target = str(tmp_path / "out" / "receipt.json")
    os.makedirs(os.path.dirname(target))
    ws.start().ok()
    ws.run("inspect", "--receipt", target).held("has no receipt yet (phase awaiting-review)", "decide", "then run inspect --receipt again")
    assert not os.path.exists(target)
    dana = make_key(tmp_path, "dana")
    ws.run("decide", "--decision", "accept", "--reviewer", "Dana", "--reason", "read it", "--sign-key", dana).ok()
    text = ws.run("inspect", "--receipt", target, "--text")
    assert text.code == 0 and f"receipt written to {target}" in text.stdout
    with open(target, "rb") as fh:
        written = fh.read()
    assert json.loads(written) == ws.receipt()
    if ws.store is None:  # byte for byte as the job keeps it
        with open(os.path.join(ws.state, "receipt.json"), "rb") as fh:
            assert fh.read() == written
    assert ws.run("inspect", "--receipt", target).ok()["receiptFile"] == target  # the same receipt again: replaced
    # with the job, the file is bound by its sha256 to the job's history; alone, by the decision's signature
    assert checks(ws.run("verify", "--receipt", target).ok())["kept receipt"]["ok"]
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), dana, ""))
    assert Workspace(tmp_path / "elsewhere").run("verify", "--receipt", target, "--allowed-signers", signers, state=False).ok()["ok"]
    # never over anything else: a manifest, another job's receipt, or another receipt of this job (kept evidence)
    other = dict(ws.receipt(), jobId="other-job")
    differs = dict(ws.receipt(), writtenAtUtc="2026-01-01T00:00:00Z")
    for path, content, why in (
        (ws.manifest, None, "is not a receipt"),
        (str(tmp_path / "other.json"), other, "holds job other-job's receipt"),
        (str(tmp_path / "kept.json"), differs, f"holds another receipt of job {ws.job_id()}"),
        (str(tmp_path / "out"), None, "is not a receipt"),
    ):
        if content is not None:
            with open(path, "w") as fh:
                json.dump(content, fh)
        before = open(path, "rb").read() if os.path.isfile(path) else None
        ws.run("inspect", "--receipt", path).held(f"--receipt {path} already exists and {why}", "nothing was written")
        assert (open(path, "rb").read() if os.path.isfile(path) else None) == before
    if ws.store is None:
        ws.run("inspect", "--receipt", os.path.join(ws.state, "copy.json")).held("is inside the state directory")
        assert not os.path.exists(os.path.join(ws.state, "copy.json"))
