"""Encrypted at rest (issue 36): a job started with a key-encryption key keeps its content as authenticated ciphertext under
a data key of its own; a copy of its storage holds none of it, no command shows it without the key, a ciphertext moved
to another row or job is refused, a shred destroys it for good, and a rotation leaves older copies unreadable."""

import base64
import json
import os
import shutil
import sqlite3
import sys

import pytest

from conftest import (
    BOILER,
    THREE,
    Workspace,
    admin_url,
    as_role,
    file_bytes,
    found_forms,
    new_key_file,
    new_store,
    openai_workspace,
    pg_dump,
    pg_restore,
    refused,
    sql,
)

REASON = "Checked each quote — the 9 percent claim is wrong; the service cost is right"
REVISED = "It saves roughly 8 percent of gas a year; serviced on Saturdays at 07:00."
CLAIMS = json.loads(THREE.removeprefix("answer:"))
CONTENT = [
    *[line for line in BOILER.splitlines() if line],
    "roughly 8 percent of gas",
    CLAIMS["summary"],
    *[c["quote"] for c in CLAIMS["citations"]],
    *[c["claim"] for c in CLAIMS["citations"]],
    REASON,
    REVISED,
    "serviced on Saturday",
]


def encrypted_boiler_job(ws: Workspace, provider, key: str) -> str:
    """The boiler job encrypted at rest: three claims from the model, a revised summary, and a decision with its reason."""
    openai_workspace(ws, provider, sources={"alpha": BOILER})
    ws.env["DURABLE_JOB_KEY_FILE"] = key
    provider.behave(THREE)
    ws.start().ok()
    summary = ws.write_source("summary.txt", REVISED)
    digest = ws.run("revise", "--item", "alpha", "--summary-file", summary, "--reviewer", "bob", "--reason", REASON).ok()["resultsSha256"]
    os.unlink(summary)
    decided = ws.run("decide", "--decision", "reject", "--reviewer", "bob", "--reason", REASON, "--results-sha256", digest).ok()
    assert decided["final"]["decision"] == "reject"
    return digest


def without_key(ws: Workspace) -> dict:
    return {k: v for k, v in ws.env.items() if k != "DURABLE_JOB_KEY_FILE"}


def test_an_encrypted_state_directory_holds_none_of_the_content_and_every_command_works_with_the_key(tmp_path, provider):
    ws = Workspace(tmp_path / "job")
    key = new_key_file(tmp_path)
    encrypted_boiler_job(ws, provider, key)
    copy = str(tmp_path / "copied-off-a-laptop")
    shutil.copytree(ws.state, copy)
    blobs = file_bytes(copy)
    assert set(blobs) >= {"effects.sqlite", "receipt.json"}
    assert any(b"dj-enc-v1+json" in b for b in blobs.values()), "LangGraph's checkpoints, encrypted, wherever the layout keeps them"
    assert found_forms(blobs, CONTENT) == []
    assert found_forms(blobs, ["alpha", "reject", "bob"]) != []  # ids, decisions and people stay clear (the search can find)
    with open(key, "rb") as fh:
        kek = fh.read()
    assert not any(kek in b or base64.b64encode(kek) in b for b in blobs.values())

    # with the key, as today
    inspected = ws.run("inspect").ok()
    assert inspected["results"][0]["summary"] == REVISED and inspected["final"]["reason"] == REASON
    assert ws.run("status").ok()["phase"] == "decided"
    verified = ws.run("verify").ok()
    assert verified["ok"] and {c["name"] for c in verified["checks"]} >= {"chain", "results", "drafts", "decision", "receipt"}
    assert REVISED in ws.run("inspect", "--text").stdout

    # without it: nothing of the content, from any command
    bare = Workspace(tmp_path / "job", inprocess=False)
    bare.env = without_key(ws)
    for command in (["status"], ["inspect"], ["inspect", "--text"], ["verify"], ["verify", "--text"]):
        done = bare.run(*command)
        printed = (done.stdout + done.stderr).encode()
        assert found_forms({"out": printed}, CONTENT) == [], command
    bare.run("status").held("EncryptedError", "is encrypted at rest and no key is given", "DURABLE_JOB_KEY_FILE")
    bare.run("inspect").held("EncryptedError", "DURABLE_JOB_KEY_FILE")
    listed = bare.run("jobs", "--root", str(tmp_path), state=False)
    assert found_forms({"out": (listed.stdout + listed.stderr).encode()}, CONTENT) == []
    report = bare.run("verify")
    assert report.code == 0, report.stderr
    checks = {c["name"]: c for c in report.json["checks"]}
    assert checks["chain"]["ok"] and checks["journal"]["ok"] and checks["seals"]["ok"]
    assert (
        checks["content"]["warning"] and "not read" in checks["content"]["detail"] and "drafts.results_json" in checks["content"]["detail"]
    )
    bare.run("verify", "--strict").held("SealError", "content: content encrypted at rest, not read")
    assert bare.run("verify", "--key-file", key).ok()["ok"]  # the flag names the key as the variable does


def test_a_ciphertext_moved_to_another_row_or_job_is_refused_naming_the_row_and_showing_nothing(tmp_path, provider):
    key = new_key_file(tmp_path)
    first, second = Workspace(tmp_path / "first"), Workspace(tmp_path / "second")
    encrypted_boiler_job(first, provider, key)
    encrypted_boiler_job(second, provider, key)
    pristine = file_bytes(first.state)

    def edit(ws: Workspace, sql: str, *params) -> None:
        conn = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
        with conn:
            conn.execute(sql, params)
        conn.close()

    # the other job's (same key-encryption key, same row, same column): it does not decrypt under this job's data key
    (theirs,) = second.journal("SELECT reason FROM drafts WHERE version = 2")[0]
    edit(first, "UPDATE drafts SET reason = ? WHERE version = 2", theirs)
    for command in ("inspect", "verify"):
        line = first.run(command).held("drafts row 2 column reason does not decrypt", "nothing of it is shown")
        assert found_forms({"line": line.encode()}, CONTENT) == []
    # this job's own value, moved to another column of the same row
    restore(first, pristine)
    (own,) = first.journal("SELECT reason FROM decisions")[0]
    edit(first, "UPDATE drafts SET reason = ? WHERE version = 2", own)
    first.run("inspect").held("EncryptedError", "drafts row 2 column reason holds a value encrypted for another row")
    first.run("verify").held("drafts row 2 column reason holds a value encrypted for another row")
    restore(first, pristine)
    assert first.run("verify").ok()["ok"]


def restore(ws: Workspace, files: dict) -> None:
    for name in os.listdir(ws.state):
        os.unlink(os.path.join(ws.state, name))
    for name, data in files.items():
        with open(os.path.join(ws.state, name), "wb") as fh:
            fh.write(data)


def fake_encrypted_job(ws: Workspace, key: str) -> None:
    """A fake-mode job at review, encrypted at rest, decided."""
    ws.write_manifest(sources={"alpha": BOILER})
    ws.env["DURABLE_JOB_KEY_FILE"] = key
    digest = ws.start().ok()["interrupt"][0]["resultsSha256"]
    ws.run("decide", "--decision", "accept", "--reviewer", "bob", "--reason", REASON, "--results-sha256", digest).ok()


def wrapped_key(ws: Workspace) -> bytes:
    (wrapped,) = ws.journal("SELECT wrapped FROM data_keys")[0]
    return wrapped.encode()


def test_shred_destroys_the_content_for_good_and_verify_still_passes(tmp_path):
    ws = Workspace(tmp_path / "job")
    key = new_key_file(tmp_path)
    fake_encrypted_job(ws, key)
    wrapped = wrapped_key(ws)
    assert any(wrapped in b or base64.b64decode(wrapped) in b for b in file_bytes(ws.state).values())
    backup = str(tmp_path / "backup")
    shutil.copytree(ws.state, backup)

    shredded = ws.run("shred").ok()["shredded"]
    assert shredded["act"] == "shred" and shredded["principal"] == ws.principal()
    after = file_bytes(ws.state)
    assert not any(wrapped in b or base64.b64decode(wrapped) in b for b in after.values()), "the wrapped key's bytes are gone"
    assert found_forms(after, CONTENT) == []
    ws.run("status").held("EncryptedError", "was shredded at", "nobody can read it")
    ws.run("inspect").held("EncryptedError", "shredded")
    report = ws.run("verify").ok()
    assert report["ok"]
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["content"]["ok"] and "content shredded" in checks["content"]["detail"]
    assert checks["chain"]["ok"] and "1 in clear rehashed" in checks["chain"]["detail"]  # the tombstone, chained
    assert "shredded (already)" in ws.run("shred", "--text").stdout

    # the backup taken before the shred still unwraps under the old key until the key is rotated
    old = Workspace(tmp_path / "job")
    old.state = backup
    old.env = dict(ws.env)
    assert old.run("inspect").ok()["final"]["reason"] == REASON
    new = new_key_file(tmp_path, "kek-2")
    other = Workspace(tmp_path / "other")
    fake_encrypted_job(other, key)
    rotated = other.run("rotate-key", "--new-key-file", new).ok()
    assert rotated["rotated"] == "rewrapped" and new in rotated["next"]
    other.run("status").held("EncryptedError", "DURABLE_JOB_KEY_FILE must name the new key file")
    other.env["DURABLE_JOB_KEY_FILE"] = new
    assert other.run("inspect").ok()["final"]["reason"] == REASON
    assert other.run("verify").ok()["ok"]
    # once every live key is rewrapped and the old key destroyed, the old backup shows nothing with the new key
    old.env["DURABLE_JOB_KEY_FILE"] = new
    line = old.run("inspect").held("EncryptedError", "DURABLE_JOB_KEY_FILE must name the new key file")
    assert found_forms({"line": line.encode()}, CONTENT) == []


@pytest.mark.parametrize("point,code,whole", [("before-shred", 102, True), ("in-shred", 103, True), ("after-shred", 104, False)])
def test_a_shred_killed_at_any_point_leaves_the_job_whole_or_shredded(tmp_path, point, code, whole):
    ws = Workspace(tmp_path / "job")
    key = new_key_file(tmp_path)
    fake_encrypted_job(ws, key)
    assert ws.run("shred", env={"DURABLE_JOB_FAKE_CRASH": point}).code == code
    if whole:
        assert ws.run("inspect").ok()["final"]["reason"] == REASON
        assert ws.run("verify").ok()["ok"]
    else:
        ws.run("inspect").held("EncryptedError", "shredded")
    ws.run("shred").ok()  # and a shred run again finishes it
    report = ws.run("verify").ok()
    assert "content shredded" in {c["name"]: c for c in report["checks"]}["content"]["detail"]


def test_bad_keys_are_one_line_holds_naming_the_file_and_the_fix(tmp_path):
    ws = Workspace(tmp_path / "job")
    key = new_key_file(tmp_path)
    short = os.path.join(str(tmp_path), "short")
    with open(short, "wb") as fh:
        fh.write(b"\0" * 16)
    ws.write_manifest(sources={"alpha": BOILER})
    ws.start(env={"DURABLE_JOB_KEY_FILE": short}).held(
        "EncryptedError", f"DURABLE_JOB_KEY_FILE {short} holds 16 bytes", "head -c 32 /dev/urandom"
    )
    missing = os.path.join(str(tmp_path), "nowhere")
    ws.start(env={"DURABLE_JOB_KEY_FILE": missing}).held("EncryptedError", f"DURABLE_JOB_KEY_FILE {missing} cannot be read")
    assert not ws.has_job()  # refused before anything was written
    fake_encrypted_job(Workspace(tmp_path / "job2"), key)
    wrong = new_key_file(tmp_path, "wrong")
    line = (
        Workspace(tmp_path / "job2")
        .run("inspect", env={"DURABLE_JOB_KEY_FILE": wrong})
        .held("EncryptedError", "is wrapped under key-encryption key")
    )
    assert "kek-" in line and open(wrong, "rb").read().hex() not in line
    other = Workspace(tmp_path / "job2")
    other.run("rotate-key", "--new-key-file", short, env={"DURABLE_JOB_KEY_FILE": key}).held("--new-key-file", "holds 16 bytes")
    other.run("rotate-key", "--new-key-file", wrong).held("UsageError", "needs the current key")


# -- a team's store ---------------------------------------------------------------------------------------------------


def encrypted_store(pg_server, tmp_path) -> tuple[str, str]:
    """A store its administrator migrated with a key-encryption key (so it encrypts every new job); (alice's URL, the key)."""
    url = new_store(pg_server)
    key = new_key_file(tmp_path)
    migrated = Workspace(tmp_path / "admin", store=admin_url(url)).run("migrate", "--store", admin_url(url), "--key-file", key).ok()
    assert migrated["encryptedAtRest"]["kekId"].startswith("kek-")
    return url, key


def test_an_encrypted_stores_dump_holds_none_of_the_content_and_every_command_works_with_the_key(pg_server, tmp_path, provider):
    url, key = encrypted_store(pg_server, tmp_path)
    ws = Workspace(tmp_path / "job", store=url)
    encrypted_boiler_job(ws, provider, key)
    dump = pg_dump(pg_server, url, str(tmp_path / "store.sql"))
    assert b"durable_job.data_keys" in dump and found_forms({"dump": dump}, ["journey", "alpha", "reject"]) != []
    assert found_forms({"dump": dump}, CONTENT) == []
    with open(key, "rb") as fh:
        kek = fh.read()
    assert kek not in dump and base64.b64encode(kek) not in dump and kek.hex().encode() not in dump

    inspected = ws.run("inspect").ok()
    assert inspected["results"][0]["summary"] == REVISED and inspected["final"]["reason"] == REASON
    assert ws.run("verify").ok()["ok"]
    listed = ws.run("jobs", "--store", url, "--key-file", key).ok()
    assert [j["phase"] for j in listed["jobs"]] == ["decided"]

    bare = Workspace(tmp_path / "job", store=url)
    bare.env = without_key(ws)
    for command in (["status"], ["inspect"], ["verify"], ["jobs", "--store", url]):
        done = bare.run(*command)
        assert found_forms({"out": (done.stdout + done.stderr).encode()}, CONTENT) == [], command
    bare.run("inspect").held("EncryptedError", "is encrypted at rest and no key is given")
    report = bare.run("verify").ok()
    assert "content encrypted at rest, not read" in {c["name"]: c for c in report["checks"]}["content"]["detail"]
    # the store encrypts every new job: one started without the key is refused before anything is written
    other = Workspace(tmp_path / "other", store=url)
    other.write_manifest(sources={"alpha": BOILER}, jobId="other")
    other.start().held("EncryptedError", "encrypts every new job at rest", "DURABLE_JOB_KEY_FILE")
    assert not other.has_job()


def test_only_the_administrator_shreds_a_store_job_and_a_rotation_leaves_old_dumps_unreadable(pg_server, tmp_path, provider):
    url, key = encrypted_store(pg_server, tmp_path)
    ws = Workspace(tmp_path / "job", store=url)
    encrypted_boiler_job(ws, provider, key)
    backup = str(tmp_path / "before-shred.sql")
    pg_dump(pg_server, url, backup)

    ws.run("shred").held("StateError", "shred is the store's administrator's")
    for statement in (
        "UPDATE durable_job.data_keys SET wrapped = NULL",
        "DELETE FROM durable_job.data_keys",
        "SET ROLE bob; UPDATE durable_job.data_keys SET kek_id = 'x'",
        "INSERT INTO durable_job.data_keys (job_id, kek_id, wrapped, created_utc) VALUES ('journey', 'k', 'w', 'now')",
        "UPDATE durable_job.sealing SET kek_id = 'x'",
    ):
        assert "permission denied" in refused(url, statement) or "row-level security" in refused(url, statement), statement
    assert sql(url, "SELECT count(*) FROM durable_job.data_keys WHERE wrapped IS NOT NULL") == [(1,)]

    admin = Workspace(tmp_path / "admin", store=admin_url(url))
    shredded = admin.run("shred", "--job", "journey").ok()["shredded"]
    assert shredded["principal"] == "durable"
    ws.run("inspect").held("EncryptedError", "was shredded at", "by durable")
    checks = {c["name"]: c for c in ws.run("verify").ok()["checks"]}
    assert "content shredded" in checks["content"]["detail"] and checks["chain"]["ok"]

    # the backup taken before the shred still holds the wrapped key: rotating the key makes it unreadable
    new = new_key_file(tmp_path, "kek-2")
    rotated = admin.run("rotate-key", "--store", admin_url(url), "--new-key-file", new, env={"DURABLE_JOB_KEY_FILE": key}).ok()
    assert rotated["jobs"] == {"rewrapped": 0, "shredded": 1, "already": 0}
    restored = as_role(pg_restore(pg_server, backup), "alice")
    old = Workspace(tmp_path / "restored", store=restored)
    old.env = {**without_key(ws), "DURABLE_JOB_KEY_FILE": new}
    for command in (["inspect"], ["status"]):
        line = old.run(*command, "--job", "journey").held("EncryptedError", "DURABLE_JOB_KEY_FILE must name the new key file")
        assert found_forms({"line": line.encode()}, CONTENT) == []


def test_a_pruned_encrypted_job_keeps_its_last_values_encrypted(tmp_path):
    ws = Workspace(tmp_path / "job")
    key = new_key_file(tmp_path)
    fake_encrypted_job(ws, key)
    pruned = ws.run("prune", "--root", str(tmp_path), "--older-than", "0", state=False).ok()
    assert [j["jobId"] for j in pruned["jobs"]] == ["journey"], pruned
    files = file_bytes(ws.state)
    assert "pruned.json" in files and found_forms(files, CONTENT) == []
    assert ws.run("inspect").ok()["results"][0]["summary"] == BOILER.splitlines()[0]
    assert ws.run("verify").ok()["ok"]
    bare = Workspace(tmp_path / "job")
    bare.env = without_key(ws)
    bare.run("inspect").held("EncryptedError", "no key is given")


@pytest.mark.parametrize("point,code,whole", [("in-shred", 103, True), ("after-shred", 104, False)])
def test_a_store_shred_killed_leaves_the_job_whole_or_shredded(pg_server, tmp_path, point, code, whole):
    url, key = encrypted_store(pg_server, tmp_path)
    ws = Workspace(tmp_path / "job", store=url)
    fake_encrypted_job(ws, key)
    admin = Workspace(tmp_path / "admin", store=admin_url(url))
    assert admin.run("shred", "--job", "journey", env={"DURABLE_JOB_FAKE_CRASH": point}).code == code
    if whole:
        assert ws.run("inspect").ok()["final"]["reason"] == REASON
        assert sql(url, "SELECT count(*) FROM durable_job.data_keys WHERE wrapped IS NOT NULL") == [(1,)]
    else:
        ws.run("inspect").held("EncryptedError", "shredded")
    admin.run("shred", "--job", "journey").ok()
    checks = {c["name"]: c for c in ws.run("verify").ok()["checks"]}
    assert "content shredded" in checks["content"]["detail"] and "1 in clear rehashed" in checks["chain"]["detail"]


KMS = """import os, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
key = open(os.environ["TEST_KMS_KEY"], "rb").read()
data = sys.stdin.buffer.read()
if sys.argv[1] == "wrap":
    nonce = os.urandom(12)
    sys.stdout.buffer.write(nonce + AESGCM(key).encrypt(nonce, data, b"kms"))
else:
    sys.stdout.buffer.write(AESGCM(key).decrypt(data[:12], data[12:], b"kms"))
"""


def test_a_key_command_holds_the_key_encryption_key_as_a_kms_or_age_would(tmp_path):
    """DURABLE_JOB_KEY_COMMAND: the program never sees the KEK, only asks the command to wrap and unwrap its data key."""
    kms = tmp_path / "kms.py"
    kms.write_text(KMS)
    ws = Workspace(tmp_path / "job")
    ws.write_manifest(sources={"alpha": BOILER})
    ws.env.update({"DURABLE_JOB_KEY_COMMAND": f"{sys.executable} {kms}", "TEST_KMS_KEY": new_key_file(tmp_path)})
    digest = ws.start().ok()["interrupt"][0]["resultsSha256"]
    ws.run("decide", "--decision", "accept", "--reviewer", "bob", "--reason", REASON, "--results-sha256", digest).ok()
    assert found_forms(file_bytes(ws.state), CONTENT) == []
    assert ws.run("inspect").ok()["final"]["reason"] == REASON
    (kek_id,) = ws.journal("SELECT kek_id FROM data_keys")[0]
    assert kek_id.startswith("cmd-")
    ws.env["TEST_KMS_KEY"] = new_key_file(tmp_path, "another")  # the KMS lost or changed its key: refused, one line
    ws.run("inspect").held("EncryptedError", "DURABLE_JOB_KEY_COMMAND failed to unwrap a data key", "fix the command")


@pytest.mark.parametrize("ws", ["dir", "store"], indirect=True)
def test_prune_shred_prunes_and_shreds_each_finished_encrypted_job_once(ws, tmp_path):
    key = new_key_file(tmp_path)
    if ws.store is not None:  # the administrator prunes a store, as they migrate it: with the key, encryption on
        Workspace(tmp_path / "admin", store=admin_url(ws.store)).run("migrate", "--store", admin_url(ws.store), "--key-file", key).ok()
    fake_encrypted_job(ws, key)
    where = ["--store", admin_url(ws.store)] if ws.store else ["--root", str(tmp_path)]
    dry = ws.run("prune", *where, "--older-than", "0", "--shred", "--dry-run", state=False).ok()
    assert [j["state"] for j in dry["jobs"]] == ["would prune, would shred"]
    done = ws.run("prune", *where, "--older-than", "0", "--shred", state=False).ok()
    assert [j["state"] for j in done["jobs"]] == ["pruned, shredded"]
    ws.run("inspect").held("EncryptedError", "shredded")
    checks = {c["name"]: c for c in ws.run("verify").ok()["checks"]}
    assert "content shredded" in checks["content"]["detail"]
    assert ws.run("prune", *where, "--older-than", "0", "--shred", state=False).ok()["jobs"] == []  # once


def test_a_store_ciphertext_copied_into_another_jobs_row_is_refused_naming_it(pg_server, tmp_path):
    url, key = encrypted_store(pg_server, tmp_path)
    first, second = Workspace(tmp_path / "first", store=url), Workspace(tmp_path / "second", store=url)
    fake_encrypted_job(first, key)
    second.write_manifest(sources={"alpha": BOILER}, jobId="second")
    second.env["DURABLE_JOB_KEY_FILE"] = key
    digest = second.start().ok()["interrupt"][0]["resultsSha256"]
    second.run("decide", "--decision", "accept", "--reviewer", "bob", "--reason", REASON, "--results-sha256", digest).ok()
    admin = admin_url(url)  # who can write a row at all: the administrator, or whoever restores a doctored backup
    sql(admin, "ALTER TABLE durable_job.decisions DISABLE TRIGGER USER")
    sql(
        admin,
        "UPDATE durable_job.decisions SET record_json = (SELECT record_json FROM durable_job.decisions WHERE job_id = 'second') WHERE job_id = 'journey'",
    )
    for command in ("inspect", "verify"):
        line = first.run(command).held("decisions row decision column record_json does not decrypt", "nothing of it is shown")
        assert found_forms({"line": line.encode()}, CONTENT) == []
    assert second.run("verify").ok()["ok"]
