"""A receipt's attacker (issue 43, items 9 and 11c): bob signs a decision, mallory edits the receipt.json he sent on, field
by field, and the person who checks it has nothing but the file and bob's public key (`verify --receipt FILE
--allowed-signers F`, no job). The decision's signed record covers the job's facts the receipt repeats (its seals, its
items' statuses, its calls' endpoints and tokens), so an edit of any fails; what a receipt adds after the act is
held by --strict to what the signed record implies; a receipt signed before the facts were covered still verifies,
under the old rules. And a store that encrypts its jobs keeps no plain digest of a source a reader could confirm a guess
against.

Real ed25519 keys made by ssh-keygen, every command a real process of the program, a real PostgreSQL store.
"""

import hashlib
import json

import pytest

import durable_job as dj
from conftest import (
    BOILER,
    NEW_RECEIPT_UNSIGNED,
    Workspace,
    admin_url,
    allowed_signers,
    as_role,
    make_key,
    new_key_file,
    new_store,
    pg_dump,
    sql,
)

FACTS = (
    "owner",
    "threadId",
    "manifestPath",
    "manifestSha256",
    "engineSha256",
    "engineParts",
    "release",
    "version",
    "dependencies",
    "statuses",
    "endpoints",
    "tokens",
)


@pytest.fixture(scope="module")
def bobs(tmp_path_factory) -> dict:
    """Bob's signed reject of a state directory's job, and what checking it needs: {receipt, signers, key, root}."""
    root = tmp_path_factory.mktemp("bobs")
    ws = Workspace(root / "job")
    ws.write_manifest()
    bob = make_key(root, "bob")
    ws.start().ok()
    ws.run("decide", "--decision", "reject", "--reviewer", "Bob Reviewer", "--reason", "the quote is wrong", "--sign-key", bob).ok()
    path = root / "receipt.json"
    ws.run("inspect", "--receipt", str(path)).ok()
    signers = allowed_signers(root, "signers", (ws.principal(), bob, ""))
    return {"receipt": json.loads(path.read_text()), "signers": signers, "key": bob, "root": root}


def verify_alone(tmp_path, receipt: dict, signers: str, *flags: str):
    """verify --receipt FILE --allowed-signers F by someone with nothing but the file and the public key."""
    path = tmp_path / "sent-receipt.json"
    path.write_text(json.dumps(receipt, indent=2))
    return Workspace(tmp_path / "elsewhere").run("verify", "--receipt", str(path), "--allowed-signers", signers, *flags, state=False)


def checks(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}


def edited_value(value):
    """Another value of a field's kind: what mallory writes over it."""
    if isinstance(value, dict):
        return {**value, "mallory": "https://evil.example/v1" if not value or isinstance(next(iter(value.values())), str) else 1}
    return "0" * 64 if isinstance(value, str) and len(value) == 64 else "mallory"


@pytest.mark.parametrize("field", ["manifestSha256", "endpoints", "owner", "statuses", "engineSha256", "tokens", "threadId"])
def test_bobs_receipt_edited_in_any_field_of_its_job_fails_naming_it(bobs, tmp_path, field):
    """The fields the receipt used to leave uncovered (a warning only, even under --strict) are in bob's signed record:
    an edit of the receipt's copy fails as the receipt changed after it was signed, with or without --strict; an edit
    of the record's own copy breaks bob's signature."""
    receipt, signers = bobs["receipt"], bobs["signers"]
    final = receipt["final"]
    assert field in final["signature"]["fields"] and final[field] == receipt[field]
    edited = {**receipt, field: edited_value(receipt[field])}
    for flags in ((), ("--strict",)):
        out = verify_alone(tmp_path, edited, signers, *flags)
        out.held("receipt fields", "the receipt was changed after it was signed", f"{field} is ")
        assert checks(out.json)["decision"]["ok"] is True and field not in out.json["unsigned"]
    inner = {**receipt, "final": {**final, field: edited_value(final[field])}, field: edited_value(receipt[field])}
    verify_alone(tmp_path, inner, signers).held("decision", "does not verify")


def test_a_new_receipt_leaves_only_what_is_written_after_the_act_and_strict_holds_each_to_it(bobs, tmp_path):
    receipt, signers = bobs["receipt"], bobs["signers"]
    final = receipt["final"]
    out = verify_alone(tmp_path, receipt, signers, "--strict").ok()
    assert out["ok"] and set(FACTS) <= set(final["signature"]["fields"])
    assert out["unsigned"] == NEW_RECEIPT_UNSIGNED
    signature = final["signature"]
    for edit, phrase in (
        ({"writtenAtUtc": "2020-01-01T00:00:00.000000Z"}, "writtenAtUtc is"),
        ({"chainHead": {"seq": 0, "sha256": "0" * 64}}, "chainHead is"),
        ({"schemaVersion": 1}, "schemaVersion is 1"),
        ({"approvedBy": "mallory"}, "approvedBy: the decision's signed record covers the job's facts"),
        ({"final": {**final, "signature": {**signature, "namespace": "git"}}}, "final.signature.namespace is"),
        ({"final": {**final, "signature": {**signature, "signedAtUtc": "2020-01-01T00:00:00Z"}}}, "final.signature.signedAtUtc is"),
    ):
        edited = {**receipt, **edit}
        plain = verify_alone(tmp_path, edited, signers).ok()  # without --strict: named, a warning, as before
        assert checks(plain)["not covered"]["warning"] is True
        line = verify_alone(tmp_path, edited, signers, "--strict").held("not covered", "--strict", phrase)
        assert "other than the signed decision implies" in line


def old_format(bobs) -> dict:
    """Bob's receipt as the program wrote it before the job's facts were signed: his record (re-signed by his key, as
    he signed it then) holds the person's words and the results' hash; the record beside it repeats the review's bundle
    (manifestSha256, engineSha256, version, statuses) unsigned."""
    receipt = bobs["receipt"]
    final = receipt["final"]
    words = ("decision", "reviewer", "reason", "decidedAtUtc", "bound", "boundResultsSha256", "draftVersion", "resultsSha256", "principal")
    record = {k: final[k] for k in words}
    signature = dj.sign_act(bobs["key"], "decision", receipt["jobId"], record, final["signature"]["chainHead"])
    bundle = {k: final[k] for k in ("jobId", "manifestSha256", "engineSha256", "version", "resultsSha256", "statuses")}
    return {**receipt, "final": {**bundle, **record, "signature": signature}}


def test_a_receipt_signed_before_still_verifies_and_strict_fails_only_what_its_record_contradicts(bobs, tmp_path):
    receipt, signers = old_format(bobs), bobs["signers"]
    for flags in ((), ("--strict",)):
        out = verify_alone(tmp_path, receipt, signers, *flags).ok()
        assert out["ok"] and checks(out)["decision"]["ok"] and checks(out)["not covered"]["warning"] is True
        for field in ("owner", "manifestSha256", "endpoints", "statuses", "final.statuses", "final.manifestSha256"):
            assert field in out["unsigned"], field
    # what its record implies: the receipt's copy of a field the record repeats, and statuses an accept or a check fits
    for edit, phrase in (
        ({"manifestSha256": "0" * 64}, "manifestSha256 is"),
        ({"statuses": {"alpha": "failed"}}, "statuses is"),
        ({"engineSha256": "0" * 64}, "engineSha256 is"),
    ):
        edited = {**receipt, **edit}
        assert verify_alone(tmp_path, edited, signers).ok()["ok"]  # the old rules: a warning without --strict
        verify_alone(tmp_path, edited, signers, "--strict").held("not covered", phrase, "in the decision's record")
    # what it cannot imply stays the receipt's word, named, even under --strict
    for edit in ({"owner": "mallory"}, {"endpoints": {"alpha#1": "https://evil.example/v1"}}):
        out = verify_alone(tmp_path, {**receipt, **edit}, signers, "--strict").ok()
        assert out["ok"] and next(iter(edit)) in checks(out)["not covered"]["detail"]


def test_an_encrypted_store_keeps_no_plain_digest_of_a_source_and_its_job_verifies_with_the_key(pg_server, tmp_path):
    """Item 11c: a short or templated source ("yes") is confirmed by hashing guesses against a sha256 kept in clear. A
    store that encrypts its jobs keeps its manifest encrypted, as its sources, and the job record's source digests keyed
    under the job's data key: neither a role's every readable row nor the administrator's dump holds a source's sha256,
    and the job verifies as before, with the key and without it."""
    url = new_store(pg_server)
    key = new_key_file(tmp_path)
    Workspace(tmp_path / "admin", store=admin_url(url)).run("migrate", "--store", admin_url(url), "--key-file", key).ok()
    ws = Workspace(tmp_path / "job", store=url)
    sources = {"alpha": BOILER, "beta": "yes\n"}
    ws.write_manifest(sources=sources, reviewers=["bob"])
    ws.env["DURABLE_JOB_KEY_FILE"] = key
    ws.start().ok()
    digests = [hashlib.sha256(text.encode()).hexdigest() for text in sources.values()]

    dump = pg_dump(pg_server, url, str(tmp_path / "store.sql"))
    assert b"durable_job.jobs" in dump and [d for d in digests if d.encode() in dump] == []
    for role in ("alice", "bob", "worker"):  # every row each role may read, every column as text
        tables = sql(as_role(url, role), "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = 'durable_job'")
        seen = " ".join(
            str(row)
            for (table,) in tables
            for row in sql(
                as_role(url, role),
                f"SELECT to_jsonb(t)::text FROM durable_job.{table} t WHERE has_table_privilege('durable_job.{table}', 'SELECT')",
            )
        )
        assert "journey" in seen or role == "worker", role  # the reader reads the job's rows
        assert [d for d in digests if d in seen] == [], role
    job = ws.run("inspect").ok()["job"]
    assert all(v.startswith("hmac-sha256:") for v in job["sources"].values()) and set(job["sources"]) == set(sources)

    report = ws.run("verify").ok()
    assert report["ok"] and {c["name"]: c for c in report["checks"]}["seals"]["detail"].startswith("manifest and sources match")
    bare = Workspace(tmp_path / "job", store=url)
    bare.env = {k: v for k, v in ws.env.items() if k != "DURABLE_JOB_KEY_FILE"}
    unread = {c["name"]: c for c in bare.run("verify").ok()["checks"]}
    assert unread["seals"]["ok"] and "encrypted at rest, not read" in unread["seals"]["detail"]
    bare.run("inspect").held("EncryptedError", "is encrypted at rest and no key is given")
