"""An upgrade (issue 43): a job the release before encrypted at rest keeps verifying under this one.

The release before (d71a186, from this repository's own history) kept an encrypted job's manifest plain and its sources'
digests as their plain sha256; this one keeps both encrypted and keyed. The journey runs the old program as a team did
(its own files, in a process of its own, on a real PostgreSQL store with real roles), then upgrades the store with
this program and goes on with the same job: read, checked, decided and its receipt verified, its record never rewritten.
"""

import hashlib
import json
import os
import subprocess

import pytest

from conftest import PROGRAM, REPO, Workspace, admin_url, as_role, new_key_file, new_store, sql, store_rows
from durable_job_team import store as store_module

OLD_RELEASE = "d71a186"  # the last release whose encrypted jobs kept plain digests (before keyed_source)
KEYED = "hmac-sha256:"  # durable_job.KEYED_PREFIX, spelled out: the test must see a changed prefix, not share it


def old_release(tmp_path) -> str:
    """The old release's files, extracted from the repository's own history into a folder of their own."""
    found = subprocess.run(["git", "-C", REPO, "cat-file", "-e", f"{OLD_RELEASE}^{{commit}}"], capture_output=True, text=True)
    if found.returncode != 0:
        pytest.fail(
            f"commit {OLD_RELEASE} (the release before keyed digests) is not in {REPO}'s git history: run the tests in a "
            f"clone of main with its history (git fetch --unshallow), not an export ({found.stderr.strip()})"
        )
    folder = tmp_path / "old-release"
    folder.mkdir()
    archive = subprocess.run(["git", "-C", REPO, "archive", "--format=tar", OLD_RELEASE], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return str(folder)


class Old:
    """The old release run as its users ran it: its own durable_job.py, importing its own durable_job_team."""

    def __init__(self, folder: str):
        self.folder = folder
        self.program = os.path.join(folder, "durable_job.py")

    def run(self, ws: Workspace, *args, env=None, state=True):
        return ws.run(*args, program=self.program, env={"PYTHONPATH": self.folder, **(env or {})}, state=state)


def job_row(url: str, job_id: str) -> tuple:
    """The job's row as the administrator reads it: its record, its manifest's bytes and its sources' bytes."""
    return sql(admin_url(url), "SELECT record_json, manifest, sources FROM durable_job.jobs WHERE job_id = %s", (job_id,))[0]


def sha256_file(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def migrations(url: str) -> list:
    return [name for (name,) in sql(admin_url(url), "SELECT name FROM durable_job._migrations ORDER BY name")]


def test_a_job_the_release_before_encrypted_at_rest_keeps_verifying_after_the_upgrade(tmp_path, pg_server):
    old = Old(old_release(tmp_path))
    store = new_store(pg_server, empty=True)  # an empty database: its owner (the administrator) sets it up
    key = new_key_file(tmp_path)
    admin = Workspace(tmp_path / "admin", store=store)
    admin.env["DURABLE_JOB_KEY_FILE"] = key
    alice, bob = (Workspace(tmp_path / role, store=as_role(store, role)) for role in ("alice", "bob"))
    for w in (alice, bob):
        w.env["DURABLE_JOB_KEY_FILE"] = key
        w.write_manifest(jobId="before-upgrade", reviewers=["bob"])

    # the release before: its own program importing its own durable_job_team, as its banner and the schema show
    banner = old.run(admin, "--version", state=False).stdout
    assert f"({old.program})" in banner and "m017_changed_one.sql" in banner and "m019_current_key" not in banner
    set_up = old.run(admin, "migrate", "--store", store, "--grant", "alice", "--grant", "bob", "--key-file", key).ok()
    old_mark = set_up["sealedAtRest"]  # the release before's migrate said it under its old name
    assert set_up["journalMigrations"] == 17 and old_mark["kekId"].startswith("kek-")
    assert migrations(store)[-1] == "m017_changed_one"
    started = old.run(alice, "start", "--manifest", alice.manifest).ok()
    assert started["interrupt"] and started["final"] is None  # at review: bob decides
    before = job_row(store, "before-upgrade")
    record = json.loads(before[0])
    assert record["codeSha256"] == sha256_file(old.program) != sha256_file(PROGRAM)
    plain = {item["id"]: item["sha256"] for item in alice.manifest_dict(reviewers=["bob"])["items"]}
    assert record["sources"] == plain  # the release before kept the sources' plain sha256
    assert bytes(before[1]).startswith(b"{") and all(
        bytes(s).startswith(b"dj-enc:") for s in before[2]
    )  # plain manifest, encrypted sources

    # the upgrade: this program migrates the store as its administrator
    upgraded = admin.run("migrate", "--store", store).ok()
    assert upgraded["changed"] is True and upgraded["encryptedAtRest"]["kekId"] == old_mark["kekId"]
    assert migrations(store)[-1] == store_module.PG_SETUP_MIGRATIONS[-1] != "m017_changed_one"

    # the old job, read and checked by this program with the key: its plain digests accepted, its record as it was
    status = alice.run("status").ok()
    assert status["phase"] == "awaiting-review" and "Executable bytes changed" in status["sealBroken"]
    inspected = alice.run("inspect").ok()
    assert inspected["job"]["sources"] == plain and [r["status"] for r in inspected["results"]] == ["validated", "validated"]
    for flags in ([], ["--strict"]):
        verified = alice.run("verify", *flags).ok()
        checks = {c["name"]: c for c in verified["checks"]}
        assert verified["ok"] and all(c["ok"] for c in checks.values()), flags
        assert "manifest and sources match" in checks["seals"]["detail"] and "made by another program" in checks["seals"]["detail"]
        assert "store schema current" in checks["files"]["detail"]
    listed = alice.run("jobs", "--store", alice.store, "--sealed-by-other").ok()["jobs"]
    assert [(j["jobId"], j["actsHere"], j["sealedBy"]["codeSha256"]) for j in listed] == [("before-upgrade", False, record["codeSha256"])]

    # bob decides: this program refuses to act on a job another program sealed (the runbook: finish it with that
    # version), touching nothing; the old program, on the upgraded store, records his decision
    digest = inspected["resultsSha256"]
    decide = ("decide", "--decision", "accept", "--reviewer", "Bob Reviewer", "--reason", "quotes match", "--results-sha256", digest)
    rows = store_rows(admin_url(store))
    bob.run(*decide).held("SealError", "Executable bytes changed", "continue with the exact program that started the job")
    assert store_rows(admin_url(store)) == rows
    decided = old.run(bob, *decide).ok()
    assert decided["final"]["decision"] == "accept" and decided["final"]["principal"] == "bob"

    # this program verifies the decision and its receipt, in the store and as a file kept apart
    kept = str(tmp_path / "receipt.json")
    shown = alice.run("inspect", "--receipt", kept).ok()
    assert shown["final"]["decision"] == "accept" and alice.run("status").ok()["phase"] == "decided"
    for flags in ([], ["--strict"], ["--receipt", kept]):
        verified = alice.run("verify", *flags)
        if flags == ["--strict"]:  # an unsigned decision fails --strict, as for any job
            verified.held("SealError", "unsigned")
            continue
        checks = {c["name"]: c for c in verified.ok()["checks"]}
        assert all(c["ok"] for c in checks.values()), flags
        assert checks["decision"]["detail"].startswith("accept by Bob Reviewer (role bob)")
        assert checks["receipt"]["detail"] == "receipt for outcome decided"
    after = job_row(store, "before-upgrade")
    assert after[0] == before[0] and bytes(after[1]) == bytes(before[1])  # the job record was never rewritten

    # a new job this program starts on the upgraded store keeps its manifest encrypted and its sources' digests keyed
    alice.write_manifest(jobId="after-upgrade", reviewers=["bob"])
    alice.start().ok()
    new_record, new_manifest, _ = job_row(store, "after-upgrade")
    new_sources = json.loads(new_record)["sources"]
    assert sorted(new_sources) == ["alpha", "beta"] and all(v.startswith(KEYED) for v in new_sources.values())
    assert set(new_sources.values()).isdisjoint(plain.values()) and not bytes(new_manifest).startswith(b"{")
    assert not any(v.startswith(KEYED) for v in json.loads(after[0])["sources"].values())
    assert alice.run("verify", "--job", "after-upgrade").ok()["ok"]
