"""A passkey's signature in hostile hands (issue 43): another page asking bob's authenticator to sign, a time set in the
future or edited after signing, a cloned authenticator, malformed passkey rows.

Real Chromium with Selenium's virtual authenticator, a real `serve` over a real PostgreSQL store, and a page of the
attacker's own on another localhost port (rpId 'localhost' is valid on every port of it): every receipt the attacker
builds is checked with the CLI, as a person would, against the allowed-passkeys file `passkeys` printed.
"""

import datetime
import json
import subprocess

import pytest
import test_passkeys
from test_passkeys import jobs_for_bob, passkey_phone, phone_accepts, phone_signs_in, registers_a_passkey
from test_web import store_counts

import durable_job
from conftest import Workspace, as_role, new_store

serving = test_passkeys.serving

# the attacker's page asks the authenticator for an assertion over a challenge of its choosing, for rpId 'localhost'
GET_ASSERTION = """
const [challenge, credential, done] = arguments;
const bytes = (s) => Uint8Array.from(atob(s.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((s.length + 3) % 4)), (c) => c.charCodeAt(0));
const text = (b) => btoa(String.fromCharCode(...new Uint8Array(b))).replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '');
navigator.credentials.get({publicKey: {challenge: bytes(challenge), rpId: 'localhost', userVerification: 'required',
  allowCredentials: [{type: 'public-key', id: bytes(credential)}]}}).then(
  (c) => done({credentialId: text(c.rawId), authenticatorData: text(c.response.authenticatorData),
               clientDataJSON: text(c.response.clientDataJSON), signature: text(c.response.signature)}),
  (e) => done({error: String(e)}));
"""


ELSEWHERE = "<!doctype html><title>a page elsewhere</title><p>Nothing to see.</p>"


def utc(seconds_from_now: float) -> str:
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def signed_on(driver, origin: str, job: str, act: str, record: dict, head: dict, fields: list | None = None) -> dict:
    """The signature record of `record`, made on the page at `origin` by bob's authenticator (the credential of the
    receipt's signature): exactly what serve would keep, but for the origin."""
    fields = sorted(record) if fields is None else fields
    challenge = durable_job.b64url(durable_job.passkey_challenge(act, job, record, head, fields))
    driver.get(f"{origin}/")
    credential = driver.get_credentials()[0].id
    got = driver.execute_async_script(GET_ASSERTION, challenge, credential)
    assert "error" not in got, got
    return {
        "format": "webauthn",
        "namespace": "durable-job",
        "chainHead": head,
        "fields": fields,
        **got,
        "rpId": "localhost",
        "origin": origin,
    }


def forged_receipt(receipt: dict, record: dict, signature: dict, cancel: dict | None = None) -> dict:
    """bob's honest receipt with the decision replaced (its top level saying the same), and a cancel beside it if given."""
    top = {k: record[k] for k in ("decision", "reviewer", "principal", "reason", "decidedAtUtc") if k in record}
    forged = {**receipt, **top, "final": {**receipt["final"], **record, "signature": signature}}
    return {**forged, "cancel": cancel} if cancel else forged


def verify_alone(ws: Workspace, tmp_path, keys, receipt: dict, name: str) -> dict:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(receipt))
    done = ws.run("verify", "--allowed-passkeys", str(keys), "--receipt", str(path), state=False)
    assert done.json is not None, done.stderr
    return done.json


def failed(report: dict) -> str:
    assert report["ok"] is False, report
    return "; ".join(c["detail"] for c in report["checks"] if not c["ok"])


def test_an_assertion_made_elsewhere_a_time_moved_or_a_cloned_authenticator_never_verifies(tmp_path, pg_server, serving, other_page, phone):
    from selenium.webdriver.common.virtual_authenticator import Credential
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    jobs = jobs_for_bob(tmp_path, store)
    ws = jobs["journey"]
    s = serving(tmp_path, "--store", store)
    port = int(s.base.rsplit(":", 1)[1])
    base = f"http://localhost:{port}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    registers_a_passkey(driver, wait)
    phone_accepts(driver, wait, base, "journey", "Read both items on my phone.")
    counted = ws.run("passkeys", "--store", store, "--json", state=False).json["passkeys"][0]["signCount"]
    assert counted > 0  # the authenticator keeps a counter, and the store kept the one serve counted

    # a copy of bob's authenticator, its counter back at 0 (a cloned key): serve refuses what it signs
    copy = driver.get_credentials()[0].to_dict()
    driver.remove_all_credentials()
    driver.add_credential(Credential.from_dict({**copy, "signCount": 0}))
    driver.get(f"{base}/jobs/second")
    wait.until(lambda d: d.find_elements("css selector", "button.accept"))
    driver.find_element("id", "reason").send_keys("Signed by the copy.")
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: "possibly cloned authenticator" in d.page_source)
    assert "Saved: accepted" not in driver.page_source
    assert store_counts(store, "decisions") == [1]  # the second job still undecided

    listed = ws.run("passkeys", "--store", store, state=False)
    keys = tmp_path / "allowed_passkeys"
    keys.write_text(listed.stdout)
    assert f" localhost {base} " in listed.stdout
    kept = tmp_path / "receipt.json"
    ws.run("inspect", "--store", as_role(store, "bob"), "--job", "journey", "--receipt", str(kept), state=False).ok()
    receipt = json.loads(kept.read_text())
    honest = receipt["final"]
    head = honest["signature"]["chainHead"]
    record = {k: honest[k] for k in honest["signature"]["fields"]}
    assert verify_alone(ws, tmp_path, keys, receipt, "honest")["ok"] is True

    # attack 2: a page on another localhost port has bob's authenticator sign a forged decision of this job
    elsewhere = other_page({"/": ELSEWHERE})
    lie = {**record, "reason": "Forged on a page elsewhere."}  # its time the honest one: only the origin gives it away
    report = verify_alone(
        ws, tmp_path, keys, forged_receipt(receipt, lie, signed_on(driver, elsewhere, "journey", "decision", lie, head)), "x"
    )
    said = failed(report)
    assert f"signed on {elsewhere}, not on {base}, where it was registered" in said and "another page" in said

    # a line written before lines named an origin: only https://localhost is taken, so the forgery fails all the same
    line = next(line for line in listed.stdout.splitlines() if line.startswith("bob "))
    principal, credential, rp, _origin, after, before, public = line.split()
    old = tmp_path / "old_passkeys"
    old.write_text(f"{principal} {credential} {rp} {after} {before} {public}\n")
    assert "not on https://localhost" in failed(verify_alone(ws, tmp_path, old, json.loads((tmp_path / "x.json").read_text()), "y"))

    # whoever holds serve's own origin (serve gone, a page on its port) can sign; the times are still checked
    s.kill()
    assert other_page({"/": ELSEWHERE}, port) == base
    future = {**record, "reason": "Decided next year.", "decidedAtUtc": utc(365 * 86400)}
    report = verify_alone(
        ws, tmp_path, keys, forged_receipt(receipt, future, signed_on(driver, base, "journey", "decision", future, head)), "f"
    )
    assert "is in the future" in failed(report)

    late = {**record, "decidedAtUtc": utc(0)}  # now: after the receipt was written, however long ago that was
    after_receipt = forged_receipt(receipt, late, signed_on(driver, base, "journey", "decision", late, head))
    assert "after the receipt's own time" in failed(verify_alone(ws, tmp_path, keys, after_receipt, "late"))

    untimed = [k for k in sorted(record) if k != "decidedAtUtc"]  # the time left out of what is signed, then edited
    signature = signed_on(driver, base, "journey", "decision", record, head, untimed)
    moved = {**record, "decidedAtUtc": utc(-5)}
    assert "does not cover its time decidedAtUtc" in failed(
        verify_alone(ws, tmp_path, keys, forged_receipt(receipt, moved, signature), "m")
    )

    # two acts whose counters run backwards in time: the later act signed first (a copy of the key in other hands)
    cancel = {
        "reviewer": "bob",
        "principal": "bob",
        "reason": "Cancelled later.",
        "cancelledAtUtc": receipt["writtenAtUtc"],
        "pendingCalls": [],
    }
    cancel_signature = signed_on(driver, base, "journey", "cancel", cancel, head)
    decision_signature = signed_on(driver, base, "journey", "decision", record, head)
    both = forged_receipt(receipt, record, decision_signature, {**cancel, "signature": cancel_signature})
    said = failed(verify_alone(ws, tmp_path, keys, both, "both"))
    assert "sign counter did not grow" in said and "possibly cloned authenticator" in said

    # a malformed line in the file: named, and the rest of the file still verifies bob's honest receipt
    keys.write_text(keys.read_text() + "bob AAAAAAAAAAAAAAAAAAAAAA local host http://localhost - - pQECAyYgASFYIAAAAAAAAAAAAAAAAAAA\n")
    report = verify_alone(ws, tmp_path, keys, receipt, "honest-again")
    assert report["ok"] is True, report
    assert any(f"{keys} line" in c["detail"] and "skipped" in c["detail"] for c in report["checks"]), report


def test_a_malformed_passkey_row_is_refused_as_it_is_written_and_never_printed_as_a_line(tmp_path, pg_server):
    from durable_job_team import store as team_store

    store = new_store(pg_server, "alice")
    good = {
        "principal": "bob",
        "credentialId": "AAAAAAAAAAAAAAAAAAAAAA",
        "rpId": "localhost",
        "origin": "http://localhost:8080",
        "validAfterUtc": "2026-01-01T00:00:00Z",
        "validBeforeUtc": None,
        "publicKey": "pQECAyYgASFYIAAAAAAAAAAAAAAAAAAA",
    }

    def psql(role: str, sql: str):
        return subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", as_role(store, role), "-c", sql], capture_output=True, text=True)

    row = "INSERT INTO durable_job.passkeys (credential_id, public_key, rp_id, origin, valid_after_utc, created_utc) VALUES "
    for rp_id, origin in (("local host", "http://localhost"), ("localhost", "http://evil.example"), ("localhost", "javascript:1")):
        refused = psql(
            "bob", row + f"('BBBBBBBBBBBBBBBBBBBBBB', '{good['publicKey']}', '{rp_id}', '{origin}', '2026-01-01T00:00:00Z', 'now')"
        )
        assert refused.returncode != 0 and "check constraint" in refused.stderr, (rp_id, origin, refused.stderr)
    bad_key = psql("bob", row + "('BBBBBBBBBBBBBBBBBBBBBB', 'not a key', 'localhost', 'http://localhost', '2026-01-01T00:00:00Z', 'now')")
    assert bad_key.returncode != 0 and "ids_base64url" in bad_key.stderr

    # bob raises his own counter only, and only upward; nothing else of the row changes
    assert (
        psql(
            "bob",
            row + f"('CCCCCCCCCCCCCCCCCCCCCC', '{good['publicKey']}', 'localhost', 'http://localhost', '2026-01-01T00:00:00Z', 'now')",
        ).returncode
        == 0
    )
    assert psql("bob", "UPDATE durable_job.passkeys SET sign_count = 5").returncode == 0
    for sql in ("UPDATE durable_job.passkeys SET sign_count = 3", "UPDATE durable_job.passkeys SET origin = 'http://localhost:1'"):
        assert psql("bob", sql).returncode != 0, sql
    assert psql("carol", "UPDATE durable_job.passkeys SET sign_count = 9").stdout.strip() == ""  # not hers: no row to change
    assert psql("alice", "SELECT sign_count FROM durable_job.passkeys").stdout.strip() == "5"

    # the code refuses it before writing, in a store and in a state directory alike
    pg = team_store.PgStore(as_role(store, "bob"), "")
    try:
        with pytest.raises(durable_job.UsageError, match="relying party 'local host' is not a host name"):
            pg.add_passkey({**good, "rpId": "local host"})
        with pytest.raises(durable_job.UsageError, match="origin"):
            pg.add_passkey({**good, "origin": "http://localhost.evil.example"})
    finally:
        pg.close()
    ws = Workspace(tmp_path / "alone")
    ws.write_manifest()
    ws.start().ok()
    mine = durable_job.StateDirStore(ws.state, None, None)
    try:
        with pytest.raises(durable_job.UsageError, match="is not a host name"):
            mine.add_passkey({**good, "rpId": "local host"})
    finally:
        mine.close()
    import sqlite3

    conn = sqlite3.connect(f"{ws.state}/effects.sqlite")
    try:  # a row written by hand, or before rows were checked: `passkeys` prints it as a comment naming why
        conn.execute(
            "INSERT INTO passkeys (credential_id, principal, public_key, rp_id, origin, valid_after_utc, created_utc) "
            "VALUES ('DDDDDDDDDDDDDDDDDDDDDD', 'me', ?, 'local host', 'http://localhost', '2026-01-01T00:00:00Z', 'now')",
            (good["publicKey"],),
        )
        conn.commit()
    finally:
        conn.close()
    listed = ws.run("passkeys", "--root", str(tmp_path / "alone"), state=False)
    assert listed.code == 0 and "# skipped passkey DDDDDDDDDDDDDDDDDDDDDD of me: relying party 'local host'" in listed.stdout, listed.stdout
    keys = tmp_path / "keys"
    keys.write_text(listed.stdout)
    checked = ws.run("verify", "--allowed-passkeys", str(keys))
    assert checked.code == 0 and checked.json["ok"] is True, checked.stderr  # the file is not refused
