"""Sign from the phone: a reviewer's passkey (WebAuthn) signs the decision made on the page, and verify checks it offline.

Real Chromium at 390×844 with Selenium's virtual authenticator (a platform authenticator that verifies its user), a real
`serve` over a real PostgreSQL store; every check afterwards runs the CLI as a person would, on copies of the receipt.
"""

import json
import sys

import test_web
from test_web import phone_signs_in, store_counts, text_of

from conftest import PROGRAM, RUN_PROGRAM, Workspace, as_role, clean_env, new_store, wait_for

serving = test_web.serving  # the fixture that starts serves and stops them after each test


def passkey_phone(driver):
    """The phone (conftest's `phone`), with a passkey authenticator built in (user verification: a fingerprint, say)."""
    driver.add_virtual_authenticator(phones_authenticator())
    return driver


def phones_authenticator():
    """The options of the phone's own authenticator (a platform one, verifying its user): Chromium's virtual one."""
    from selenium.webdriver.common.virtual_authenticator import Protocol, Transport, VirtualAuthenticatorOptions

    return VirtualAuthenticatorOptions(
        protocol=Protocol.CTAP2,
        transport=Transport.INTERNAL,
        has_resident_key=True,
        has_user_verification=True,
        is_user_consenting=True,
        is_user_verified=True,
    )


def jobs_for_bob(tmp_path, store: str, names=("journey", "second")) -> dict:
    """alice's jobs in the store, one a name, each awaiting bob's review: {name: its workspace}."""
    jobs = {}
    for job in names:
        jobs[job] = Workspace(tmp_path / job, store=store)
        jobs[job].write_manifest(jobId=job, reviewers=["bob"])
        jobs[job].start().ok()
    return jobs


def registers_a_passkey(driver, wait) -> None:
    """bob, signed in on the job's page, taps the button that registers this phone's passkey; the page says so."""
    driver.find_element("id", "passkey-register").click()
    wait.until(lambda d: "signed with your passkey" in d.page_source)


def phone_accepts(driver, wait, base: str, job: str, reason: str, ticks: int = 0) -> None:
    """bob accepts on the page, having ticked the first `ticks` claims' checks."""
    driver.get(f"{base}/jobs/{job}")
    wait.until(lambda d: d.find_elements("css selector", "button.accept"))
    assert "signed with your passkey" in driver.page_source
    for box in driver.find_elements("css selector", "input[name=checked]")[:ticks]:
        driver.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", box)
    driver.find_element("id", "reason").send_keys(reason)
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: "Saved: accepted by bob (role bob)" in d.page_source)  # read whole: the page is being replaced
    assert "signed with passkey" in driver.page_source


def verify(ws: Workspace, *flags):
    return ws.run("verify", *flags, state=False)


def test_bob_signs_his_decision_with_his_phones_passkey_and_verify_checks_it_offline(tmp_path, pg_server, serving, phone):
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    jobs = jobs_for_bob(tmp_path, store)
    ws = jobs["journey"]
    s = serving(tmp_path, "--store", store)
    port = s.base.rsplit(":", 1)[1]
    assert f"http://localhost:{port}/" in "".join(s.err)  # serve names the address a passkey can use
    base = f"http://localhost:{port}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    assert "recorded unsigned" in driver.page_source
    register = driver.find_element("id", "passkey-register")
    assert "passkey" in register.text
    register.click()
    wait.until(lambda d: "signed with your passkey" in d.page_source)
    phone_accepts(driver, wait, base, "journey", "Read both items on my phone.", ticks=1)
    phone_accepts(driver, wait, base, "second", "The second one, too.")
    assert store_counts(store, "decisions", "receipts", "passkeys") == [2, 2, 1]

    # the passkeys as lines of a file, piped: reviewed by a person and kept outside the store
    listed = ws.run("passkeys", "--store", store, state=False)
    assert listed.code == 0 and listed.json is None, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if line and not line.startswith("#")]
    assert len(lines) == 1 and lines[0].split()[0] == "bob" and lines[0].split()[2:4] == ["localhost", base]  # where it was registered
    keys = tmp_path / "allowed_passkeys"
    keys.write_text(listed.stdout)

    # another machine: a copy of the receipt, and the store
    bob = as_role(store, "bob")
    copies = {}
    for job in ("journey", "second"):
        copies[job] = tmp_path / f"{job}-receipt.json"
        ws.run("inspect", "--store", bob, "--job", job, "--receipt", str(copies[job]), state=False).ok()
    receipt = json.loads(copies["journey"].read_text())
    signature = receipt["final"]["signature"]
    assert signature["format"] == "webauthn" and signature["rpId"] == "localhost" and signature["origin"] == base
    assert {"authenticatorData", "clientDataJSON", "signature", "credentialId"} <= set(signature)
    # the claim bob ticked is part of what his passkey signed
    assert len(receipt["final"]["checked"]["claims"]) == 1 and "checked" in signature["fields"]
    assert receipt["final"]["reason"] == "Read both items on my phone." and receipt["principal"] == "bob"

    checked = verify(
        ws, "--strict", "--allowed-passkeys", str(keys), "--receipt", str(copies["journey"]), "--store", bob, "--job", "journey"
    )
    report = checked.ok()
    assert report["ok"] is True, report
    said = next(c for c in report["checks"] if c["name"] == "signatures")["detail"]
    assert "decision signed by bob with passkey" in said and "verified" in said
    alone = verify(ws, "--allowed-passkeys", str(keys), "--receipt", str(copies["journey"]))
    assert alone.ok()["ok"] is True and alone.ok()["verified"]

    # --strict never trusts a key from the store alone: no file, no pass
    verify(ws, "--strict", "--store", bob, "--job", "journey").held("--allowed-passkeys FILE")
    assert "not checked" in verify(ws, "--store", bob, "--job", "journey").ok()["checks"][-1]["detail"]

    # a changed decision
    changed = {**receipt, "decision": "reject", "final": {**receipt["final"], "decision": "reject"}}
    tampered = tmp_path / "changed.json"
    tampered.write_text(json.dumps(changed))
    held = verify(ws, "--allowed-passkeys", str(keys), "--receipt", str(tampered)).held("verify found")
    assert "signs another record" in held

    # another job's assertion on this job's decision
    other = json.loads(copies["second"].read_text())["final"]["signature"]
    spliced = tmp_path / "spliced.json"
    spliced.write_text(json.dumps({**receipt, "final": {**receipt["final"], "signature": {**other, "chainHead": signature["chainHead"]}}}))
    assert "signs another record" in verify(ws, "--allowed-passkeys", str(keys), "--receipt", str(spliced)).held()

    # the key outside its validity at the decision's time, then a key not in the file
    principal, credential, rp, origin, _after, _before, public = lines[0].split()
    for bounds in (("2000-01-01T00:00:00Z", "2001-01-01T00:00:00Z"), ("2999-01-01T00:00:00Z", "-")):
        expired = tmp_path / "expired_passkeys"
        expired.write_text(f"{principal} {credential} {rp} {origin} {bounds[0]} {bounds[1]} {public}\n")
        held = verify(ws, "--strict", "--allowed-passkeys", str(expired), "--store", bob, "--job", "journey").held()
        assert "outside passkey" in held and "validity" in held
    stranger = tmp_path / "stranger_passkeys"
    stranger.write_text(f"{principal} AAAA{credential[4:]} {rp} {origin} - - {public}\n")
    assert "is not among them" in verify(ws, "--strict", "--allowed-passkeys", str(stranger), "--store", bob, "--job", "journey").held()
    carols = tmp_path / "carols_passkeys"
    carols.write_text(f"carol {credential} {rp} {origin} - - {public}\n")
    assert "registered for carol, not bob" in verify(ws, "--allowed-passkeys", str(carols), "--store", bob, "--job", "journey").held()


def test_a_role_registers_passkeys_only_for_itself(tmp_path, pg_server):
    """The store's policies: bob's row names bob whatever he writes; a worker registers none; nobody changes one."""
    import subprocess

    store = new_store(pg_server, "alice")

    def psql(role: str, sql: str):
        return subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", as_role(store, role), "-c", sql], capture_output=True, text=True)

    row = "INSERT INTO durable_job.passkeys (credential_id, principal, public_key, rp_id, origin, valid_after_utc, created_utc) "
    key, after = "pQECAyYgASFYIAAAAAAAAAAAAAAAAAAA", "2026-01-01T00:00:00Z"
    forged = psql("bob", row + f"VALUES ('cred-1-AAAAAAAAAAAA', 'alice', '{key}', 'localhost', 'http://localhost', '{after}', 'now')")
    assert forged.returncode == 0, forged.stderr
    assert psql("alice", "SELECT principal FROM durable_job.passkeys").stdout.strip() == "bob"  # stamped: his own
    tricked = psql(
        "bob",
        "SET ROLE alice; " + row + f"VALUES ('cred-2-AAAAAAAAAAAA', 'alice', '{key}', 'localhost', 'http://localhost', '{after}', 'now')",
    )
    assert tricked.returncode != 0
    worker = psql("worker", row + f"VALUES ('cred-3-AAAAAAAAAAAA', 'worker', '{key}', 'localhost', 'http://localhost', '{after}', 'now')")
    assert worker.returncode != 0 and "row-level security" in worker.stderr
    for sql in ("UPDATE durable_job.passkeys SET principal = 'bob'", "DELETE FROM durable_job.passkeys"):
        changed = psql("bob", sql)
        assert changed.returncode != 0 and ("history" in changed.stderr or "permission denied" in changed.stderr), changed.stderr
    assert psql("carol", "SELECT count(*) FROM durable_job.passkeys").stdout.strip() == "1"
    listed = subprocess.run(
        [sys.executable, RUN_PROGRAM, PROGRAM, "passkeys", "--store", store], capture_output=True, text=True, env=clean_env()
    )
    assert listed.returncode == 0 and "\nbob cred-1-AAAAAAAAAAAA localhost http://localhost " in listed.stdout
    assert listed.stdout.startswith("# durable-job")


def test_under_root_the_accounts_passkey_is_kept_in_the_jobs_journal_and_signs_its_decision(tmp_path, serving, phone):
    from selenium.webdriver.support.ui import WebDriverWait

    ws = Workspace(tmp_path)
    ws.write_manifest()
    ws.start().ok()
    s = serving(tmp_path, "--root", str(tmp_path))
    port = s.base.rsplit(":", 1)[1]
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    driver.get(f"http://127.0.0.1:{port}/jobs/journey?" + s.address.split("?", 1)[1])
    wait.until(lambda d: d.find_elements("css selector", "button.accept"))
    assert "passkeys need a host name" in driver.page_source and not driver.find_elements("id", "passkey-register")
    wait_for(lambda: any("sign in once at" in line for line in s.err), timeout=10)
    token = [line for line in s.err if "sign in once at" in line][-1].split("?", 1)[1].strip()
    driver.get(f"http://localhost:{port}/jobs/journey?{token}")  # the next one-time address, by the host's name
    wait.until(lambda d: d.find_elements("id", "passkey-register"))
    driver.find_element("id", "passkey-register").click()
    wait.until(lambda d: "signed with your passkey" in d.page_source)
    driver.find_element("id", "reason").send_keys("Mine, signed.")
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: "Saved: accepted by" in d.page_source and "signed with passkey" in d.page_source)
    assert len(ws.journal("SELECT * FROM passkeys")) == 1
    listed = ws.run("passkeys", "--root", str(tmp_path), state=False)
    assert listed.code == 0 and listed.stdout.count(" localhost ") == 1
    keys = tmp_path / "allowed_passkeys"
    keys.write_text(listed.stdout)
    assert ws.run("verify", "--strict", "--allowed-passkeys", str(keys)).ok()["ok"] is True
    assert ws.run("inspect", "--text").stdout.count("signed with passkey") >= 1


def stuck_panel(driver) -> str:
    """The text of the decide form's "no passkey answered" panel while it is shown ("" while hidden or absent)."""
    return driver.execute_script(
        "const p = document.querySelector('#decide-form .passkey-stuck'); return p && !p.hidden ? p.innerText : ''"
    )


def options_sent(base: str, ws: Workspace) -> dict:
    """What serve sends bob's page for navigator.credentials.create() and .get() (signed in at http://localhost:PORT,
    where his passkey is registered): the register options, and the sign options of an accept of ws's job."""
    import types

    import httpx
    from test_web import csrf, sign_in

    def client() -> httpx.Client:
        return httpx.Client(base_url=base, headers={"Origin": base}, timeout=30, limits=httpx.Limits(keepalive_expiry=2.0))

    c = sign_in(types.SimpleNamespace(client=client), "bob")
    try:
        headers = {"x-csrftoken": csrf(c)}
        register = c.post("/api/passkeys/options", json={"jobId": ws.job_id()}, headers=headers)
        digest = ws.run("inspect").ok()["resultsSha256"]
        body = {"command": "decide", "decision": "accept", "reviewer": "bob", "reason": "-", "resultsSha256": digest}
        sign = c.post(f"/api/jobs/{ws.job_id()}/sign", json=body, headers=headers)
    finally:
        c.close()
    assert register.status_code == sign.status_code == 200, (register.text, sign.text)
    return {"register": register.json(), "sign": sign.json()}


def test_a_passkey_that_never_answers_leaves_bob_ways_on_try_again_or_a_decision_recorded_unsigned(tmp_path, pg_server, serving, phone):
    """Issue 45 (5): this browser lacks bob's passkey (his other device has it), so nothing answers. Within serve's
    --passkey-seconds the page says so and offers the ways on: try again (once his passkey answers, it signs), another
    device, or the decision recorded unsigned, which every output then calls unsigned."""
    import time

    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    jobs = jobs_for_bob(tmp_path, store)
    s = serving(tmp_path, "--store", store, "--passkey-seconds", "2")
    base = f"http://localhost:{s.base.rsplit(':', 1)[1]}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    registers_a_passkey(driver, wait)
    options = options_sent(base, jobs["second"])
    assert options["register"]["timeout"] == options["sign"]["timeout"] == 2000 and options["sign"]["unsigned"] is True
    kept = driver.get_credentials()  # bob's passkey, as his other device holds it
    assert len(kept) == 1
    driver.remove_virtual_authenticator()  # this browser no longer has it: nothing will answer the page

    driver.get(f"{base}/jobs/journey")
    wait.until(lambda d: d.find_elements("css selector", "button.reject"))
    driver.find_element("id", "passkey-register").click()  # registering waits no longer than signing
    said = WebDriverWait(driver, 10, poll_frequency=0.1).until(
        lambda d: "answered" in text_of(d, "passkey-said") and text_of(d, "passkey-said")
    )
    assert said.startswith("No passkey answered on this device: nothing was registered"), said
    driver.find_element("id", "reason").send_keys("Item beta is wrong.")
    asked = time.monotonic()
    driver.find_element("css selector", "button.reject").click()
    said = WebDriverWait(driver, 10, poll_frequency=0.1).until(stuck_panel)
    waited = time.monotonic() - asked
    assert 1.5 <= waited < 6, (waited, said)  # serve's deadline of 2 s, not the browser's own minute (or forever)
    assert "No passkey answered on this device" in said and "waited 2 seconds" in said and "Nothing was recorded" in said
    assert "on another device where your passkey is" in said and f"{base}/jobs/journey" in said
    buttons = {b.text for b in driver.find_elements("css selector", "#decide-form .passkey-stuck button") if b.is_displayed()}
    assert buttons == {"Try again", "Reject unsigned"}, buttons
    assert store_counts(store, "decisions", "receipts") == [0, 0]

    # his passkey answers here again (the authenticator back, with his credential): Try again signs the rejection
    driver.add_virtual_authenticator(phones_authenticator())
    driver.add_credential(kept[0])
    driver.find_element("css selector", "#decide-form .passkey-retry").click()
    wait.until(lambda d: "Saved: rejected by bob (role bob)" in d.page_source and "signed with passkey" in d.page_source)

    # on the second job the person cancels the passkey's prompt (it refuses to verify them): the same ways on, at once
    driver.set_user_verified(False)
    driver.get(f"{base}/jobs/second")
    wait.until(lambda d: d.find_elements("css selector", "button.hold"))
    driver.find_element("id", "reason").send_keys("Waiting for the owner.")
    driver.find_element("css selector", "button.hold").click()
    said = wait.until(stuck_panel)
    assert "No passkey answered on this device" in said and "cancelled or refused" in said
    assert store_counts(store, "decisions") == [1]
    unsigned = driver.find_element("css selector", "#decide-form .passkey-unsigned")
    assert unsigned.text == "Hold unsigned"
    unsigned.click()
    wait.until(lambda d: "Recorded: hold by bob (role bob)" in d.page_source)
    assert "(unsigned)" in text_of(driver, "said")
    assert store_counts(store, "decisions", "passkeys") == [2, 1]
    bob = as_role(store, "bob")
    rejected = jobs["journey"].run("inspect", "--store", bob, "--job", "journey", state=False).ok()
    assert rejected["final"]["decision"] == "reject" and rejected["final"]["signature"]["format"] == "webauthn"
    held = jobs["second"].run("inspect", "--store", bob, "--job", "second", "--text", state=False).stdout
    assert "unsigned" in held, held
    strict = jobs["second"].run("verify", "--strict", "--store", bob, "--job", "second", state=False)
    assert "decision unsigned" in strict.held()


def test_serve_refuses_a_passkey_wait_out_of_range_in_one_line(tmp_path):
    import subprocess

    def held(*args) -> str:
        proc = subprocess.run(
            [sys.executable, RUN_PROGRAM, PROGRAM, "serve", *args], capture_output=True, text=True, env=clean_env(), timeout=60
        )
        assert proc.returncode == 2 and proc.stderr.startswith("HOLD: ") and proc.stderr.count("\n") == 1, proc.stderr
        assert "Traceback" not in proc.stderr and "unrecognized" not in proc.stderr, proc.stderr
        return proc.stderr

    for seconds in ("0", "601", "-5"):
        said = held("--root", str(tmp_path), "--passkey-seconds", seconds)
        assert f"--passkey-seconds {seconds}: give a whole number of seconds from 1 to 600 (default 60)" in said
    assert "--passkey-seconds: invalid int value: 'x'" in held("--root", str(tmp_path), "--passkey-seconds", "x")
    for seconds in ("1", "600"):  # the bounds themselves are taken: the refusal is then of the missing folder
        assert "is not a folder" in held("--root", str(tmp_path / "missing"), "--passkey-seconds", seconds)
