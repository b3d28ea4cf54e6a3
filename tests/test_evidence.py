"""Evidence no one can quietly rewrite (issue 22): every act of a job is a link of one chain, the receipt binds
its head, and the person who decides signs with their own SSH key (real ed25519 keys made by ssh-keygen here).
The review that rewrote a decided job is replayed on both backends: one change of one table or file at a time,
then a whole consistent rewrite, which only a signature (or a kept receipt) catches.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from conftest import BOTH, REPO, Workspace, admin_url, allowed_signers, as_role, copy_program, in_the_engine, make_key

SUMMARY = "Alpha revenue rose 12 percent in the quarter."


def signatures(report: dict) -> dict:
    return {c["name"]: c for c in report["checks"]}["signatures"]


def decided(ws: Workspace, key: str | None, reviewer: str = "Dana Reviewer", decision: str = "reject") -> dict:
    flags = ["--sign-key", key] if key else []
    return ws.run("decide", "--decision", decision, "--reviewer", reviewer, "--reason", "the quote is wrong", *flags).ok()


@BOTH
def test_a_signed_decision_verifies_with_the_deciders_key_at_its_own_time_and_with_no_other(ws, tmp_path):
    dana, mallory = make_key(tmp_path, "dana"), make_key(tmp_path, "mallory")
    ws.start().ok()
    final = decided(ws, dana)["final"]
    signature = final["signature"]
    assert signature["armored"].startswith("-----BEGIN SSH SIGNATURE-----") and signature["namespace"] == "durable-job"
    assert "signed with an SSH key over the chain's head" in ws.run("inspect", "--text").stdout
    me = ws.principal()
    unchecked = signatures(ws.run("verify").ok())
    assert unchecked["ok"] and "decision signed (not checked: give --allowed-signers FILE)" in unchecked["detail"]
    good = allowed_signers(tmp_path, "good", (me, dana, ""))
    assert signatures(ws.run("verify", "--allowed-signers", good).ok())["detail"] == f"decision signed by {me}, verified"
    if ws.store is None:  # beside the receipt, as ssh-keygen -Y verify -s reads it
        with open(os.path.join(ws.state, "receipt.json.sig")) as fh:
            assert fh.read() == signature["armored"]
    # an entry that expired after the signature was made still verifies: the signature is checked at its own time
    signed_at = datetime.strptime(final["decidedAtUtc"][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    # (valid before the second after the one it was signed in: verify-time names whole seconds; expired once that is past)
    later = (signed_at + timedelta(seconds=1)).strftime("%Y%m%d%H%M%SZ")
    while datetime.now(UTC) <= signed_at + timedelta(seconds=2):
        time.sleep(0.05)
    expired_since = allowed_signers(tmp_path, "expired-since", (me, dana, f',valid-before="{later}"'))
    assert signatures(ws.run("verify", "--allowed-signers", expired_since).ok())["ok"]
    for name, entry, why in (
        ("wrong-key", (me, mallory, ""), "does not verify"),
        ("wrong-principal", ("mallory", dana, ""), "does not verify"),
        ("expired-before", (me, dana, ',valid-before="20200101Z"'), "expired"),
        ("valid-after", (me, dana, f',valid-after="{(signed_at + timedelta(days=1)).strftime("%Y%m%d")}Z"'), "not yet valid"),
    ):
        ws.run("verify", "--allowed-signers", allowed_signers(tmp_path, name, entry)).held("signatures", why)
    # no key material in the state, the store or any output
    with open(dana) as fh:
        private = fh.read()
    saved = json.dumps(ws.state_bytes(), default=repr)
    assert "PRIVATE KEY" not in saved and private.splitlines()[1] not in saved


@BOTH
def test_a_missing_or_locked_key_is_a_hold_before_anything_is_recorded(ws, tmp_path):
    ws.start().ok()
    before = ws.state_bytes()
    locked = make_key(tmp_path, "locked", passphrase="correct horse battery staple")
    ws.run("decide", "--decision", "hold", "--reviewer", "D", "--reason", "r", "--sign-key", locked).held(
        f"signing key {locked} could not sign", "ssh-agent (ssh-add", "nothing was recorded"
    )
    ws.run("decide", "--decision", "hold", "--reviewer", "D", "--reason", "r", "--sign-key", str(tmp_path / "none")).held(
        "is not a file", "--sign-key PATH"
    )
    assert ws.state_bytes() == before
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    key = make_key(tmp_path, "dana")
    out = ws.run("decide", "--decision", "hold", "--reviewer", "D", "--reason", "r", env={"DURABLE_JOB_SIGNING_KEY": key}).ok()
    assert out["final"]["signature"]["armored"]  # the environment names the key as well as the flag


@BOTH
def test_a_whole_consistent_rewrite_passes_only_unsigned_and_strict_verify_refuses_it(ws, tmp_path):
    """The reviewer's attack at its strongest: the history rebuilt from the state at review, every link recomputed by
    the program itself, with another decision. Only a signature tells it from the real one."""
    dana = make_key(tmp_path, "dana")
    ws.start().ok()
    forged = at_review_copy(ws, tmp_path)
    decided(ws, dana, "Dana Reviewer", "reject")
    decided(forged, None, "Mallory Boss", "accept")
    report = forged.run("verify").ok()
    assert report["ok"] and "decision unsigned" in signatures(report)["detail"]
    assert "caught only by a signature or a kept receipt" in signatures(report)["detail"]
    forged.run("verify", "--strict").held("signatures", "decision unsigned")
    good = allowed_signers(tmp_path, "good", (ws.principal(), dana, ""))
    assert ws.run("verify", "--strict", "--allowed-signers", good).ok()["ok"]
    # the real receipt, kept elsewhere, does not fit the forged history
    real = ws.receipt()
    assert real["decision"] == "reject" and forged.receipt()["decision"] == "accept"
    assert real["chainHead"]["sha256"] != forged.receipt()["chainHead"]["sha256"]


def at_review_copy(ws: Workspace, tmp_path) -> Workspace:
    """A copy of the job as it stands (a state directory copied, or the store's database copied whole)."""
    if ws.store is None:
        copy = Workspace(tmp_path / "copy")
        shutil.rmtree(copy.src)
        shutil.copytree(ws.src, copy.src)
        shutil.copytree(ws.state, copy.state)
        return copy
    copy = Workspace(tmp_path / "copy", store=copy_database(ws.store))
    copy.write_manifest(jobId=ws.job_id())
    return copy


def copy_database(url: str) -> str:
    """A new database made from the store's (CREATE DATABASE … TEMPLATE), as the same role reaches it."""
    name = "t" + uuid.uuid4().hex[:16]
    base = url.rsplit("/", 1)[1]
    admin = admin_url(url).rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin.replace("durable@", "postgres@", 1), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER durable TEMPLATE "{base}"')
    return url.rsplit("/", 1)[0] + "/" + name


# -- the tamper matrix -----------------------------------------------------------------------------------------
# Each target: (where, table, the column a change or a swap edits, the key column an inserted copy gets a new value in).
DIR_TARGETS = [
    ("effects", "calls", "output_text", "operation_key"),
    ("effects", "call_events", "detail_json", "id"),
    ("effects", "drafts", "reason", "version"),
    ("effects", "outcomes", "record_json", "kind"),
    ("effects", "decisions", "reviewer", None),
    ("effects", "links", "record_json", "seq"),
    ("effects", "checkpoints", "metadata", "checkpoint_id"),  # LangGraph's two tables, in the journal's file
    ("effects", "writes", "value", "task_id"),
]
STORE_TARGETS = [
    ("store", "calls", "output_text", "operation_key"),
    ("store", "call_events", "detail_json", "id"),
    ("store", "drafts", "reason", "version"),
    ("store", "outcomes", "record_json", "kind"),
    ("store", "decisions", "reviewer", None),
    ("store", "links", "record_json", "seq"),
    ("store", "receipts", "receipt_json", None),
    ("store", "jobs", "record_json", None),
    ("store", "checkpoints", "metadata", "checkpoint_id"),
    ("store", "checkpoint_writes", "blob", "task_id"),
    ("store", "checkpoint_blobs", "blob", "version"),
]
OPS = ("change", "reorder", "delete", "insert")


def signed_decided_job(ws: Workspace, tmp_path, signed: bool = True) -> str:
    """A job with two revisions (two drafts rows), decided and signed (or not); returns the allowed_signers file."""
    ws.start().ok()
    summary = os.path.join(ws.root, "summary.txt")
    with open(summary, "w") as fh:
        fh.write(SUMMARY)
    for item in ("alpha", "beta"):
        ws.run("revise", "--item", item, "--summary-file", summary, "--reviewer", "Rita", "--reason", f"tighter {item}").ok()
    key = make_key(tmp_path, "dana")
    decided(ws, key if signed else None)
    return allowed_signers(tmp_path, "signers", (ws.principal(), key, ""))


def changed(value):
    """One value, changed: text gets a word, bytes a byte, JSON a key (so that it still parses)."""
    if isinstance(value, bytes | memoryview):
        return bytes(value) + b" "
    if isinstance(value, dict):
        return json.dumps({**value, "tampered": True})
    if isinstance(value, str) and value.startswith("{"):
        return json.dumps({**json.loads(value), "tampered": True})
    return f"{value} (tampered)"


class SqliteRows:
    def __init__(self, path):
        self.conn = sqlite3.connect(path)
        self.ident = "rowid"

    def rows(self, table, column):
        return self.conn.execute(f"SELECT rowid, {column} FROM {table} ORDER BY rowid").fetchall()

    def set(self, table, column, ident, value):
        self.conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, ident))

    def delete(self, table, ident):
        self.conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (ident,))

    def insert_copy(self, table, key, ident):
        cursor = self.conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (ident,))
        names = [d[0] for d in cursor.description]
        row = dict(zip(names, cursor.fetchone()))
        row[key] = None if key == "id" else (row[key] + 100 if isinstance(row[key], int) else f"{row[key]}z")
        self.conn.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    def plant_cancel(self):
        self.conn.execute(
            "INSERT INTO outcomes (kind, record_json, created_utc, principal) VALUES ('cancel', '{}', '2026-12-01T00:00:00Z', 'x')"
        )

    def close(self):
        self.conn.commit()
        self.conn.close()


class StoreRows(SqliteRows):
    def __init__(self, url):
        self.conn = psycopg.connect(admin_url(url))

    def rows(self, table, column):
        return self.conn.execute(f"SELECT ctid::text, {column} FROM durable_job.{table} ORDER BY ctid").fetchall()

    def plant_cancel(self):
        self.conn.execute(
            "INSERT INTO durable_job.outcomes (job_id, kind, record_json, created_utc) "
            "SELECT job_id, 'cancel', '{}', '2026-12-01T00:00:00Z' FROM durable_job.jobs"
        )

    def set(self, table, column, ident, value):
        cast = "%s::jsonb" if column == "metadata" else "%s"
        value = json.dumps(value) if isinstance(value, dict) else value
        self.conn.execute(f"UPDATE durable_job.{table} SET {column} = {cast} WHERE ctid = %s::tid", (value, ident))

    def delete(self, table, ident):
        self.conn.execute(f"DELETE FROM durable_job.{table} WHERE ctid = %s::tid", (ident,))

    def insert_copy(self, table, key, ident):
        cursor = self.conn.execute(f"SELECT * FROM durable_job.{table} WHERE ctid = %s::tid", (ident,))
        names = [d.name for d in cursor.description]
        row = dict(zip(names, cursor.fetchone()))
        row[key] = row[key] + 100 if isinstance(row[key], int) else f"{row[key]}z"
        row = {k: (json.dumps(v) if isinstance(v, dict) else v) for k, v in row.items() if k not in ("seq",) or table == "links"}
        if key == "id":
            row.pop("id")
        self.conn.execute(f"INSERT INTO durable_job.{table} ({', '.join(row)}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values()))


def tamper(rows, table, column, key, op) -> bool:
    """Apply one tampering; False when the table has too few rows for it, or its own keys refuse it."""
    try:
        return tamper_rows(rows, table, column, key, op)
    except (sqlite3.IntegrityError, psycopg.errors.IntegrityError):  # a job's row its journal's rows still reference
        rows.conn.rollback()
        return False


def tamper_rows(rows, table, column, key, op) -> bool:
    found = rows.rows(table, column)
    if op == "change" and found:
        rows.set(table, column, found[0][0], changed(found[0][1]))
    elif op == "reorder" and len(found) >= 2 and found[0][1] != found[1][1]:
        rows.set(table, column, found[0][0], found[1][1])
        rows.set(table, column, found[1][0], found[0][1])
    elif op == "delete" and found:
        rows.delete(table, found[-1][0])
    elif op == "insert" and found and key:
        rows.insert_copy(table, key, found[0][0])
    elif op == "insert" and table == "outcomes":  # a decided job has none: a cancel planted beside its decision
        rows.plant_cancel()
    else:
        return False
    return True


NAMED = {
    "jobs": "job record",
    "receipts": "receipt",
    "writes": "checkpoint",
    "checkpoints": "checkpoint",
    "checkpoint_writes": "checkpoint",
    "checkpoint_blobs": "checkpoint",
}


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_every_change_of_a_state_directory_is_named_by_verify_signed_or_not(tmp_path, signed):
    """Signed or not: anything short of a whole consistent rewrite is caught by the chain alone."""
    ws = Workspace(tmp_path / "job")
    ws.write_manifest()
    signers = signed_decided_job(ws, tmp_path, signed)
    assert ws.run("verify", *(["--strict"] if signed else []), "--allowed-signers", signers).ok()["ok"]
    caught = {}
    for where, table, column, key in DIR_TARGETS:
        for op in OPS:
            copy = tmp_path / f"{table}-{op}"
            shutil.copytree(ws.state, copy / "state")
            rows = SqliteRows(copy / "state" / f"{where}.sqlite")
            applied = tamper(rows, table, column, key, op)
            rows.close()
            if applied:
                caught[(table, op)] = failures(ws, ["--state-dir", str(copy / "state")], signers)
    edits = {"job.json": {"approvedBy": "mallory@example.test"}, "receipt.json": {"reviewer": "Mallory Boss"}}
    for name, edit in edits.items():
        copy = tmp_path / f"{name}-change"
        shutil.copytree(ws.state, copy / "state")
        path = copy / "state" / name
        path.write_text(json.dumps({**json.loads(path.read_text()), **edit}))
        caught[(name.split(".")[0], "change")] = failures(ws, ["--state-dir", str(copy / "state")], signers)
    assert_all_named(caught, 29)


@pytest.mark.parametrize("targets", [STORE_TARGETS[:6], STORE_TARGETS[6:]], ids=["journal", "records-and-checkpoints"])
def test_every_change_of_a_signed_store_job_is_named_by_verify(tmp_path, pg_server, targets):
    from conftest import new_store

    ws = Workspace(tmp_path / "job", store=new_store(pg_server))
    ws.write_manifest()
    signers = signed_decided_job(ws, tmp_path)
    assert ws.run("verify", "--strict", "--allowed-signers", signers).ok()["ok"]
    caught = {}
    for _, table, column, key in targets:
        for op in OPS:
            copy = copy_database(ws.store)
            rows = StoreRows(copy)
            applied = tamper(rows, table, column, key, op)
            rows.close()
            if applied:
                caught[(table, op)] = failures(ws, ["--store", copy, "--job", ws.job_id()], signers)
    assert_all_named(caught, 20 if targets is STORE_TARGETS[:6] else 15)


def failures(ws: Workspace, address: list, signers: str) -> str:
    """Every failed check's detail of one verify (it must fail: exit 2, one HOLD line)."""
    out = ws.run("verify", *address, "--allowed-signers", signers, state=False)
    assert out.code == 2 and out.stderr.startswith("HOLD: "), (address, out.stdout[-2000:])
    return " | ".join(c["detail"] for c in out.json["checks"] if not c["ok"])


def assert_all_named(caught: dict, at_least: int) -> None:
    """Each tampering failed verify with a detail naming what was changed; the matrix covered what it should."""
    print("\n".join(f"{t} {op}: {why[:200]}" for (t, op), why in caught.items()))
    assert len(caught) >= at_least, sorted(caught)
    unnamed = {k: why for k, why in caught.items() if NAMED.get(k[0], k[0]) not in why}
    assert not unnamed, unnamed


@BOTH
@pytest.mark.parametrize("point", ["after-decision-row", "after-decide"])
def test_a_signed_decide_killed_before_its_receipt_is_finished_by_a_resume_without_the_key(ws, tmp_path, point):
    key = make_key(tmp_path, "dana")
    ws.start().ok()
    crashed = ws.run(
        "decide", "--decision", "reject", "--reviewer", "Dana", "--reason", "r", "--sign-key", key, env={"DURABLE_JOB_FAKE_CRASH": point}
    )
    assert crashed.code != 0 and ws.receipt() is None
    finisher = ws if ws.store is None else Workspace(tmp_path / "worker", store=as_role(ws.store, "worker"))
    if ws.store is not None:
        finisher.write_manifest(jobId=ws.job_id())
    finisher.run("resume").ok()  # no key: the signature is already part of the decision's record
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), key, ""))
    report = ws.run("verify", "--strict", "--allowed-signers", signers).ok()
    assert signatures(report)["detail"] == f"decision signed by {ws.principal()}, verified"
    assert ws.receipt()["final"]["signature"]["armored"].startswith("-----BEGIN SSH SIGNATURE-----")


@BOTH
def test_a_receipt_you_kept_is_checked_against_the_job_or_alone_by_its_signature(ws, tmp_path):
    key = make_key(tmp_path, "dana")
    ws.start().ok()
    forged = at_review_copy(ws, tmp_path)
    decided(ws, key)
    kept = tmp_path / "kept-receipt.json"
    kept.write_text(json.dumps(ws.receipt()))
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), key, ""))
    fits = {c["name"]: c for c in ws.run("verify", "--receipt", str(kept)).ok()["checks"]}["kept receipt"]
    assert fits["ok"] and "fits links rows" in fits["detail"]
    decided(forged, None, "Mallory Boss", "accept")  # the same job, its history rebuilt: the kept receipt does not fit it
    forged.run("verify", "--receipt", str(kept)).held("kept receipt", "does not fit this job's history")
    alone = Workspace(tmp_path / "elsewhere")  # someone with only the receipt and the reviewer's public key
    report = alone.run("verify", "--receipt", str(kept), "--allowed-signers", signers, state=False).ok()
    final = ws.receipt()["final"]
    said = f"decision reject by {ws.principal()} (Dana Reviewer) at {final['decidedAtUtc']}, results sha256 {final['resultsSha256']}"
    checks = {c["name"]: c for c in report["checks"]}
    assert report["verified"] == [said] and checks["decision"] == {"name": "decision", "ok": True, "detail": f"{said}, signed and verified"}
    assert checks["receipt fields"]["ok"] and checks["not covered"]["warning"]  # tests/test_receipt_file.py goes field by field
    edited = tmp_path / "edited-receipt.json"
    edited.write_text(json.dumps({**ws.receipt(), "final": {**ws.receipt()["final"], "decision": "accept"}}))
    alone.run("verify", "--receipt", str(edited), "--allowed-signers", signers, state=False).held("does not verify")
    alone.run("verify", "--receipt", str(kept), state=False).held("not checked: give --allowed-signers FILE")


def test_a_job_sealed_by_another_program_is_verified_and_one_before_the_chain_says_so(ws, tmp_path):
    other = copy_program(tmp_path, lambda text: in_the_engine(text, "# another build of the program"))
    ws.run("start", "--manifest", ws.manifest, program=other).ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "D", "--reason", "r", program=other).ok()
    seals = {c["name"]: c for c in ws.run("verify").ok()["checks"]}["seals"]
    assert "made by another program" in seals["detail"] and "every record is checked all the same" in seals["detail"]
    old = os.path.join(str(tmp_path), "old", "durable_job.py")
    os.makedirs(os.path.dirname(old))
    with open(old, "wb") as fh:  # the program as it was before the chained history
        fh.write(subprocess.run(["git", "-C", REPO, "show", "4c8ae52:durable_job.py"], capture_output=True, check=True).stdout)
    before = Workspace(tmp_path / "before")
    before.write_manifest()
    before.run("start", "--manifest", before.manifest, program=old).ok()
    before.run("decide", "--decision", "hold", "--reviewer", "D", "--reason", "r", program=old).ok()
    chain = {c["name"]: c for c in before.run("verify").ok()["checks"]}["chain"]
    assert chain == {"name": "chain", "ok": True, "warning": True, "detail": chain["detail"]}
    assert chain["detail"].startswith("history not chained: consistency checks only")
    before.run("verify", "--strict").held("chain", "history not chained")


@BOTH
def test_an_approver_signs_the_manifest_at_seal_and_the_job_keeps_the_signature(ws, tmp_path):
    approver = make_key(tmp_path, "olga")
    alpha = os.path.join(ws.src, "alpha.txt")
    seal = ["seal", "--out", ws.manifest, "--job-id", "approved", "--approved-by", "olga@example.test", "--mode", "fake"]
    seal += ["--model", "fake-structural-1", "--force", alpha]
    out = ws.run(*seal, "--sign-key", approver).ok()
    assert out["signature"] == ws.manifest + ".sig" and os.path.exists(out["signature"])
    # sealing again without a key leaves no signature of the old bytes beside the new ones (before a job seals them:
    # seal --force then refuses to overwrite its manifest)
    ws.run(*seal).ok()
    assert not os.path.exists(ws.manifest + ".sig")
    ws.run(*seal, "--sign-key", approver).ok()
    ws.start().ok()
    assert ws.job()["approvalSignature"].startswith("-----BEGIN SSH SIGNATURE-----")
    olga = allowed_signers(tmp_path, "olga", ("olga@example.test", approver, ""))
    assert "approval signed by olga@example.test, verified" in signatures(ws.run("verify", "--allowed-signers", olga).ok())["detail"]
    impostor = allowed_signers(tmp_path, "impostor", ("olga@example.test", make_key(tmp_path, "mallory"), ""))
    ws.run("verify", "--allowed-signers", impostor).held("signatures", "approval's signature does not verify as olga@example.test")
    if ws.store is None:  # a state directory's job reads its manifest file at every resume: seal --force leaves it
        ws.run(*seal).held("is the manifest job approved", "--out NEW.json")
        assert os.path.exists(ws.manifest + ".sig")


def test_a_key_held_by_ssh_agent_signs_a_cancel_through_its_public_half(ws, tmp_path):
    """The private key is only in the agent (its file removed): --sign-key names the .pub, as git's user.signingKey does."""
    key = make_key(tmp_path, "dana")
    socket = str(tmp_path / "agent.sock")
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", socket], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        env = {"SSH_AUTH_SOCK": socket}
        deadline = time.time() + 10
        while not os.path.exists(socket) and time.time() < deadline:
            time.sleep(0.05)
        subprocess.run(["ssh-add", "-q", key], env={**os.environ, **env}, check=True, capture_output=True)
        os.unlink(key)  # nothing but the agent holds the private key now
        assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
        out = ws.run("cancel", "--reviewer", "Dana", "--reason", "wrong sources", "--sign-key", key + ".pub", env=env).ok()
        assert out["cancelled"]["signature"]["armored"].startswith("-----BEGIN SSH SIGNATURE-----")
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    with open(os.path.join(ws.state, "receipt.json.sig")) as fh:
        assert fh.read() == out["cancelled"]["signature"]["armored"]
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), key, ""))
    assert signatures(ws.run("verify", "--allowed-signers", signers).ok())["detail"] == f"cancel signed by {ws.principal()}, verified"


@BOTH
def test_a_reconcile_signed_at_the_terminal_verifies_as_its_principal_and_strict_fails_an_unsigned_one(ws, tmp_path):
    """reconcile --sign-key signs the person's record of an uncertain call as decide signs a decision: verify checks it
    with the signer's key over the chain's head just under the call's outcome, and not with another key; --strict fails a
    reconcile recorded unsigned."""
    dana, mallory = make_key(tmp_path, "dana"), make_key(tmp_path, "mallory")
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.run("status").ok()["calls"][0][0]
    abandon = ("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "Dana", "--reason", "no usage")
    out = ws.run(*abandon, "--sign-key", dana).ok()
    record = out["reconciliation"]
    assert record["signature"]["format"] == "sshsig" and "reconciledAtUtc" in record["signature"]["fields"]
    again = ws.run(*abandon, "--sign-key", dana).ok()  # the same reconcile again: the first record answers it
    assert again["existing"] is True and again["reconciliation"] == record
    assert "already recorded at" in ws.run(*abandon, "--text").stdout and "signed with an SSH key" in ws.run(*abandon, "--text").stdout
    me = ws.principal()
    good = allowed_signers(tmp_path, "good", (me, dana, ""))
    said = signatures(ws.run("verify", "--strict", "--allowed-signers", good).ok())["detail"]
    assert f"reconciliation signed by {me}, verified" in said
    wrong = allowed_signers(tmp_path, "wrong", (me, mallory, ""))
    assert "reconciliation" in ws.run("verify", "--allowed-signers", wrong).held()

    other = Workspace(tmp_path / "unsigned", store=ws.store)
    other.write_manifest(jobId="unsigned-reconcile")
    assert other.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    other_key = other.run("status").ok()["calls"][0][0]
    other.run("reconcile", "--operation-key", other_key, "--action", "abandon", "--reviewer", "Dana", "--reason", "no usage").ok()
    assert "reconciliation unsigned" in signatures(other.run("verify").ok())["detail"]
    other.run("verify", "--strict").held("reconciliation unsigned", "reconcile --sign-key PATH")
