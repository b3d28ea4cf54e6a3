"""An uncertain call settled from the phone (issue 49): the page says which item's call is uncertain, since when, where it
was sent, the request id to look for and that its tokens are unknown, in at most six short lines; the owner or a
reviewer completes it from the provider's answer pasted there, or abandons it, signed with their passkey, recorded
once; the job goes on (a worker takes it). A worker sees who may settle it, and no form. Real `serve`, real PostgreSQL,
real Chromium at 390×844 with its virtual authenticator (test_passkeys' phone)."""

import json
import re

import test_web
from test_passkeys import passkey_phone, registers_a_passkey
from test_web import csrf, fits_a_phone, phone_signs_in, root_browser, sign_in, store_counts, text_of

import durable_job as dj
from conftest import ALPHA, Workspace, as_, as_role, hold_run_lock, new_store, password_of, posted_at_once, sha256

serving = test_web.serving  # the fixture that starts serves and stops them after each test


def crashed_jobs(tmp_path, store: str, names=("journey", "second")) -> dict:
    """alice's jobs in the store, reviewed by bob, each left with an uncertain call: its run killed right after the call's
    pending row was committed (so the call may have reached the model)."""
    jobs = {}
    for job in names:
        jobs[job] = Workspace(tmp_path / job, store=store)
        jobs[job].write_manifest(jobId=job, reviewers=["bob"])
        assert jobs[job].start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    return jobs


def pending_key(ws: Workspace) -> str:
    ((key, item, status, *_),) = ws.run("status").ok()["calls"]
    assert (item, status) == ("alpha", "pending")
    return key


def providers_answer() -> dict:
    """What the provider's record holds for item alpha's call, as a person copies it from there."""
    job = {"jobId": "journey", "model": "fake-structural-1", "mode": "fake"}
    item = {"id": "alpha", "sha256": sha256(ALPHA.encode())}
    text, response_id, request_id, _ = dj.call_model(job, item, ALPHA, dj.model_input(item, ALPHA, []))
    return {"outputText": text, "responseId": response_id, "requestId": request_id}


def said_lines(driver) -> dict:
    """The uncertain call's explanation as the phone shows it: how many lines of text it takes (each item's line boxes,
    a box starting half a line below the last one's top a new line), its items, what is bold, whether a <details> is open."""
    return driver.execute_script(
        "var ul = document.getElementById('uncertain-said'), n = 0;"
        "Array.from(ul.children).forEach(function (li) { var tops = [], w = document.createTreeWalker(li, NodeFilter.SHOW_TEXT), t;"
        "  while ((t = w.nextNode())) { if (!t.parentElement.checkVisibility()) continue; var r = document.createRange(); r.selectNodeContents(t);"
        "    Array.from(r.getClientRects()).forEach(function (b) { if (b.width > 0 && b.height > 0) tops.push(b.top); }); }"
        "  var half = parseFloat(getComputedStyle(li).fontSize) * 0.6, top = null;"
        "  tops.sort(function (a, b) { return a - b; }).forEach(function (y) { if (top === null || y >= top + half) { n += 1; top = y; } }); });"
        "return {lines: n, items: ul.children.length, bold: Array.from(ul.querySelectorAll('b')).map(function (b) { return b.innerText; }),"
        " open: Array.from(ul.querySelectorAll('details')).some(function (d) { return d.open; })}"
    )


def settles(driver, wait, form: str, reason: str, **pasted) -> None:
    """On the job's page: open the way to settle it (`form`: complete or abandon), paste what the provider's record
    holds (as a paste, whole), give the reason and tap; the passkey signs it."""
    driver.find_element("css selector", f"#settle-{form} summary").click()
    for name, value in pasted.items():
        driver.execute_script(
            "arguments[0].value = arguments[1];", driver.find_element("css selector", f"#reconcile-{form} [name={name}]"), value
        )
    driver.find_element("id", f"{form}-reason").send_keys(reason)
    driver.find_element("css selector", f"#reconcile-{form} button[type=submit]").click()
    wait.until(lambda d: "Recorded: the call of item alpha" in text_of(d, "said"))


def taps_twice(driver, wait, form: str, reason: str) -> list:
    """Settle the call (`form`) with a reason, the signed form sent twice at once (a double tap, or a phone that sends
    again); what each answer's page said (its flash line; a refusal's page, which has none: its first words)."""
    driver.find_element("css selector", f"#settle-{form} summary").click()
    driver.find_element("id", f"{form}-reason").send_keys(reason)
    driver.execute_script(  # once the passkey signed it, the page's script submits it: here, twice at once
        "var form = document.getElementById(arguments[0]); window.tapped = null;"
        "form.requestSubmit = function () { var body = new URLSearchParams(new FormData(form));"
        "  Promise.all([0, 1].map(function () { return fetch(form.getAttribute('action'), {method: 'POST', body: body, credentials: 'same-origin'})"
        "    .then(function (r) { return r.text(); }); })).then(function (pages) { window.tapped = pages; }); };",
        f"reconcile-{form}",
    )
    driver.find_element("css selector", f"#reconcile-{form} button[type=submit]").click()
    wait.until(lambda d: d.execute_script("return window.tapped"))
    return driver.execute_script(
        "return window.tapped.map(function (h) { var e = new DOMParser().parseFromString(h, 'text/html').getElementById('said');"
        " return e ? e.textContent : (new DOMParser().parseFromString(h, 'text/html').body.innerText.slice(0, 300)); })"
    )


def test_bob_completes_an_uncertain_call_from_the_providers_answer_alice_abandons_another_a_worker_only_reads(
    tmp_path, pg_server, serving, phone
):
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    jobs = crashed_jobs(tmp_path, store)
    keys = {job: pending_key(ws) for job, ws in jobs.items()}
    s = serving(tmp_path, "--store", store)
    base = f"http://localhost:{s.base.rsplit(':', 1)[1]}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)

    # a worker sees the call explained and who may settle it: no form, no passkey to register
    phone_signs_in(driver, wait, base, "second", "worker")
    assert said_lines(driver)["items"] == 6
    assert text_of(driver, "uncertain-who") == "Only its owner alice or its reviewers (bob) may settle it."
    assert not driver.find_elements("css selector", "#uncertain form, #uncertain details.settle, #passkey-register")
    driver.delete_all_cookies()

    phone_signs_in(driver, wait, base, "journey", "bob")
    said = said_lines(driver)
    assert said["items"] == 6 and said["lines"] <= 6 and said["bold"] == ["alpha"] and not said["open"], said
    explained = text_of(driver, "uncertain-said")
    assert "Item alpha" in explained and "Since 20" in explained and "Tokens: unknown." in explained
    assert keys["journey"] not in explained and keys["journey"][:8] in explained  # the request id clipped, one tap away
    driver.find_element("css selector", "#uncertain-said details.id summary").click()
    assert keys["journey"] in text_of(driver, "uncertain-said")
    assert "Needs a person" in text_of(driver, "live-state")
    fits_a_phone(driver)
    driver.save_screenshot(str(tmp_path / "uncertain-390x844.png"))

    registers_a_passkey(driver, wait)
    settles(driver, wait, "complete", "Found it in the provider's logs by its request id.", **providers_answer())
    assert "signed with passkey" in text_of(driver, "said") and not driver.find_elements("id", "uncertain")

    # the job goes on: a worker takes it to review
    worker = as_(jobs["journey"], "worker", tmp_path)
    done = worker.run("work", "--store", worker.store, "--until-idle", state=False).ok()
    assert {r["jobId"]: r["to"] for r in done["runs"]}.get("journey") == "awaiting-review"
    driver.get(f"{base}/jobs/journey")
    wait.until(lambda d: "Awaiting review" in text_of(d, "live-state"))

    # alice, the owner, abandons the other job's call with her own passkey
    driver.delete_all_cookies()
    phone_signs_in(driver, wait, base, "second", "alice")
    registers_a_passkey(driver, wait)
    said = taps_twice(driver, wait, "abandon", "Its usage shows nothing for that hour.")  # her thumb taps twice
    assert not any("Refused" in t for t in said) and any("abandoned by alice (role alice)" in t for t in said), said
    assert any("signed with passkey" in t or "Already recorded" in t for t in said), said
    assert store_counts(store, "passkeys", "call_events WHERE event = 'reconciled' AND job_id = 'second'") == [2, 1]

    # each reconcile is signed by its person's passkey, and verify --strict checks it offline
    listed = jobs["journey"].run("passkeys", "--store", store, state=False)
    allowed = tmp_path / "allowed_passkeys"
    allowed.write_text(listed.stdout)
    for job, who in (("journey", "bob"), ("second", "alice")):
        report = jobs[job].run(
            "verify", "--strict", "--allowed-passkeys", str(allowed), "--store", as_role(store, who), "--job", job, state=False
        )
        said_signed = next(c for c in report.ok()["checks"] if c["name"] == "signatures")["detail"]
        assert f"reconciliation signed by {who} with passkey" in said_signed and "verified" in said_signed, said_signed
    assert (
        jobs["second"]
        .run("verify", "--strict", "--store", as_role(store, "alice"), "--job", "second", state=False)
        .held("--allowed-passkeys FILE")
    )


def test_a_post_from_another_origin_a_replayed_signature_and_a_worker_posting_anyway_record_nothing(tmp_path, pg_server, serving):
    store = new_store(pg_server, "alice")
    jobs = crashed_jobs(tmp_path, store, names=("journey",))
    key = pending_key(jobs["journey"])
    s = serving(tmp_path, "--store", store)
    fields = {"operationKey": key, "action": "abandon", "reviewer": "x", "reason": "no usage"}

    bob = sign_in(s, "bob")
    elsewhere = bob.post(
        "/jobs/journey/reconcile", data={"csrftoken": csrf(bob), **fields}, headers={"Origin": "https://elsewhere.example"}
    )
    assert elsewhere.status_code == 403
    forged = bob.post("/jobs/journey/reconcile", data={"csrftoken": "not-the-pages", **fields})
    assert forged.status_code == 403
    replayed = bob.post(
        "/jobs/journey/reconcile", data={"csrftoken": csrf(bob), **fields, "challenge": "c2lnbmVkLWVsc2V3aGVyZQ", "passkey": "{}"}
    )
    assert replayed.status_code == 409 and "was not asked for here, or was already used" in replayed.text

    worker = sign_in(s, "worker")
    page = worker.get("/jobs/journey").text
    assert "Only its owner alice or its reviewers (bob) may settle it." in page and "/reconcile" not in page
    posted = worker.post("/jobs/journey/reconcile", data={"csrftoken": csrf(worker), **fields})
    assert posted.status_code == 303
    assert "Role worker may not reconcile" in worker.get("/jobs/journey").text
    signing = worker.post("/api/jobs/journey/sign", json={"command": "reconcile", **fields}, headers={"x-csrftoken": csrf(worker)})
    assert signing.status_code in (400, 403, 409)
    assert store_counts(store, "call_events WHERE event = 'reconciled'") == [0]
    assert jobs["journey"].run("status").ok()["phase"] == "uncertain-call"

    # cancelled, the job's page has no box to settle the call in: its journal row says where to look, with no command
    jobs["journey"].run("cancel", "--reviewer", "alice", "--reason", "not needed").ok()
    page = bob.get("/jobs/journey").text
    journal = page.split("<section id='journal'>")[1].split("</section>")[0]
    assert 'id="uncertain"' not in page and "Outcome not known yet: <code>status</code> at a terminal says what to do." in journal
    assert "--operation-key" not in journal and "the box above" not in journal


def test_bob_looks_an_uncertain_call_up_at_the_provider_that_kept_its_record_and_signs_what_it_found(
    tmp_path, pg_server, provider, serving, phone
):
    """A job whose provider keeps the record (chat, stored completions): the page offers the lookup first. bob taps it and
    backs out of his passkey's prompt: the provider was asked, nothing was recorded. He taps again and his passkey signs
    the answer it found, which is the call's, recorded with the lookup in one act, once; nothing is sent again, and verify
    --strict checks it."""
    from selenium.webdriver.support.ui import WebDriverWait
    from test_provider_record import CHAT, kill_while_unanswered, posts

    store = new_store(pg_server, "alice")
    ws = Workspace(tmp_path / "journey", store=store)
    row = kill_while_unanswered(ws, provider, "stored-hang", reviewers=["bob"])  # alice's job, bob reviews
    s = serving(tmp_path, "--store", store, env=provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))
    base = f"http://localhost:{s.base.rsplit(':', 1)[1]}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    assert [e.get_attribute("id") for e in driver.find_elements("css selector", "#uncertain details.settle")] == [
        "settle-lookup",
        "settle-complete",
        "settle-abandon",
    ]
    registers_a_passkey(driver, wait)
    before = store_counts(store, "call_events", "links")
    driver.set_user_verified(False)  # he backs out of the prompt: the lookup was asked what it would sign, no more
    driver.find_element("css selector", "#settle-lookup summary").click()
    driver.find_element("id", "lookup-reason").send_keys("The provider kept it: take what it holds.")
    driver.find_element("css selector", "#reconcile-lookup button[type=submit]").click()
    wait.until(lambda d: d.execute_script("var p = document.querySelector('#reconcile-lookup .passkey-stuck'); return p && !p.hidden"))
    assert "nothing was recorded" in text_of(driver, "passkey-said")
    found = driver.execute_script("var p = document.querySelector('#reconcile-lookup .lookup-found'); return p.hidden ? '' : p.innerText")
    assert found.startswith("The provider holds its answer, response chatcmpl-"), found  # what it found, shown before signing
    assert store_counts(store, "call_events", "links") == before  # the journal and its chain as they were
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch"]
    driver.set_user_verified(True)
    driver.find_element("css selector", "#reconcile-lookup .passkey-retry").click()  # he taps again: his passkey signs
    wait.until(lambda d: "Recorded: the call of item alpha" in text_of(d, "said"))
    said = text_of(driver, "said")
    assert "completed by bob (role bob)" in said and "signed with passkey" in said, said
    [done] = ws.calls()
    assert done["status"] == "completed" and f"response {done['response_id']}:" in found
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch", "looked-up", "reconciled"]  # recorded once
    assert store_counts(store, "call_events", "links") == [before[0] + 2, before[1] + 3]  # and an outcome link
    assert posts(provider, CHAT) == {row["operation_key"]: 1}  # nothing sent again
    allowed = tmp_path / "allowed_passkeys"
    allowed.write_text(ws.run("passkeys", "--store", store, state=False).stdout)
    report = ws.run(
        "verify", "--strict", "--allowed-passkeys", str(allowed), "--store", as_role(store, "bob"), "--job", "journey", state=False
    )
    assert "reconciliation signed by bob with passkey" in next(c for c in report.ok()["checks"] if c["name"] == "signatures")["detail"]


def test_a_lookup_that_finds_nothing_at_the_provider_says_so_on_the_phone_and_records_nothing(
    tmp_path, pg_server, provider, serving, phone
):
    """The provider kept no completion under the call's key: bob's tap on the lookup asks it, the page says it found none
    and that nothing was recorded (no passkey prompt, nothing to sign), and the journal and its chain are as they were;
    he then abandons the call. (At a terminal, reconcile --from-provider records that it found nothing.)"""
    from selenium.webdriver.support.ui import WebDriverWait
    from test_provider_record import kill_while_unanswered

    store = new_store(pg_server, "alice")
    ws = Workspace(tmp_path / "journey", store=store)
    row = kill_while_unanswered(ws, provider, "hang", reviewers=["bob"])  # the provider stored nothing
    s = serving(tmp_path, "--store", store, env=provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))
    base = f"http://localhost:{s.base.rsplit(':', 1)[1]}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    registers_a_passkey(driver, wait)
    before = store_counts(store, "call_events", "links")
    driver.find_element("css selector", "#settle-lookup summary").click()
    driver.find_element("id", "lookup-reason").send_keys("The provider may have kept it.")
    driver.find_element("css selector", "#reconcile-lookup button[type=submit]").click()
    said = wait.until(lambda d: "Not signed" in text_of(d, "passkey-said") and text_of(d, "passkey-said"))
    assert "found 0 stored completions" in said and "nothing was taken" in said and "listing is recorded" not in said, said
    assert 'paste its answer under "Paste the provider\'s answer"' in said and "--" not in said, said  # the page's way, no flag
    assert store_counts(store, "call_events", "links") == before
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch"]
    settles(driver, wait, "abandon", "Nothing at the provider under its key.")
    assert "abandoned by bob (role bob)" in text_of(driver, "said") and ws.calls()[0]["status"] == "abandoned"


def test_a_reconcile_from_the_page_waits_for_the_command_holding_the_job_and_two_taps_record_it_once(tmp_path, serving):
    """Under --root: while another command holds the job (a run that may be completing this very call), a tap settles
    nothing: it waits for the job, then says it is busy. Two taps at once, once it is free: one record, the second
    answered by it. Then the page offers to resume the job, which goes on to review."""
    ws = Workspace(tmp_path)
    ws.write_manifest()
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = pending_key(ws)
    s = serving(tmp_path, "--root", str(tmp_path))
    browser = root_browser(s)
    fields = {"csrftoken": csrf(browser), "operationKey": key, "action": "abandon", "reviewer": "Dana", "reason": "no usage"}

    holder = hold_run_lock(ws.state)
    try:
        assert browser.post("/jobs/journey/reconcile", data=fields).status_code == 303
    finally:
        holder.stdin.close()
        holder.wait()
    busy = browser.get("/jobs/journey").text
    assert "Refused:" in busy and "decide" in busy and 'id="uncertain"' in busy  # the holder named; the call still to settle
    assert ws.db_rows("SELECT count(*) FROM call_events WHERE event = 'reconciled'") == [(0,)]

    answers = posted_at_once(browser, "/jobs/journey/reconcile", fields, 2)
    assert [a.status_code for a in answers] == [303, 303]
    assert ws.db_rows("SELECT count(*) FROM call_events WHERE event = 'reconciled'") == [(1,)]
    page = browser.get("/jobs/journey").text
    assert "Refused" not in page and re.search(r"(Already recorded|Recorded): the call of item alpha abandoned by Dana", page)

    assert 'action="/jobs/journey/resume"' in page  # the job goes on: the page offers to resume it
    assert browser.post("/jobs/journey/resume", data={"csrftoken": fields["csrftoken"]}).status_code == 303
    resumed = browser.get("/jobs/journey").text
    assert "Resumed: the job is now awaiting review." in resumed and "Awaiting review" in resumed and "/resume" not in resumed
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_under_root_the_account_settles_the_call_on_its_phone_signed_with_its_passkey_and_resumes_the_job(tmp_path, serving, phone):
    from selenium.webdriver.support.ui import WebDriverWait

    ws = Workspace(tmp_path)
    ws.write_manifest()
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    s = serving(tmp_path, "--root", str(tmp_path))
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    driver.get(f"http://localhost:{s.base.rsplit(':', 1)[1]}/jobs/journey?" + s.address.split("?", 1)[1])  # by the host's name
    wait.until(lambda d: d.find_elements("id", "passkey-register"))
    said = said_lines(driver)
    assert said["items"] == 6 and said["lines"] <= 6, said
    fits_a_phone(driver)
    registers_a_passkey(driver, wait)
    settles(driver, wait, "complete", "Found in the provider's logs.", **providers_answer())
    assert "signed with passkey" in text_of(driver, "said")
    driver.find_element("css selector", "#resume button[type=submit]").click()  # the job goes on from the page
    wait.until(lambda d: "Resumed: the job is now awaiting review." in text_of(d, "said"))
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    allowed = tmp_path / "allowed_passkeys"
    allowed.write_text(ws.run("passkeys", "--root", str(tmp_path), state=False).stdout)
    report = ws.run("verify", "--strict", "--allowed-passkeys", str(allowed)).ok()
    assert "reconciliation signed by" in next(c for c in report["checks"] if c["name"] == "signatures")["detail"]


def test_a_signature_bobs_passkey_made_for_one_reconcile_records_no_other(tmp_path, pg_server, serving, phone):
    """bob's passkey signs an abandon; the signed form, captured before it is sent, is replayed with another reason, on
    another job, and as it was once used: each records nothing, and his own tap then records it once."""
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    jobs = crashed_jobs(tmp_path, store)
    s = serving(tmp_path, "--store", store)
    base = f"http://localhost:{s.base.rsplit(':', 1)[1]}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    registers_a_passkey(driver, wait)
    driver.find_element("css selector", "#settle-abandon summary").click()
    driver.find_element("id", "abandon-reason").send_keys("No usage that hour.")
    driver.execute_script(  # the signed form, kept instead of sent
        "var form = document.getElementById('reconcile-abandon'); window.signed = null;"
        "form.requestSubmit = function () { window.signed = Array.from(new FormData(form).entries()); };"
    )
    driver.find_element("css selector", "#reconcile-abandon button[type=submit]").click()
    wait.until(lambda d: d.execute_script("return window.signed"))
    signed = dict(driver.execute_script("return window.signed"))
    assert signed["challenge"] and json.loads(signed["passkey"])["signature"]

    def replay(path: str, **changed) -> str:
        """The signed form posted from the page itself (its origin, its session), changed; the answer's words."""
        return driver.execute_script(
            "return fetch(arguments[0], {method: 'POST', body: new URLSearchParams(arguments[1]), credentials: 'same-origin'})"
            ".then(function (r) { return r.text(); }).then(function (h) { var d = new DOMParser().parseFromString(h, 'text/html');"
            " var e = d.getElementById('said'); return e ? e.textContent : d.body.innerText; })",
            path,
            {**signed, **changed},
        )

    assert "Changed since your passkey signed (reason)" in replay("/jobs/journey/reconcile", reason="Something else.")
    assert "not asked for here, or was already used" in replay("/jobs/journey/reconcile")  # used up by the first replay
    assert "not asked for here, or was already used" in replay("/jobs/second/reconcile", operationKey=pending_key(jobs["second"]))
    assert store_counts(store, "call_events WHERE event = 'reconciled'") == [0]
    driver.get(f"{base}/jobs/journey")
    settles(driver, wait, "abandon", "No usage that hour.")  # bob taps again: a fresh signature, recorded once
    assert store_counts(store, "call_events WHERE event = 'reconciled'") == [1]


def test_a_pasted_answer_left_open_across_a_restart_ends_on_a_sign_in_that_fills_it_in_again_and_records_it_once(
    tmp_path, pg_server, serving, phone
):
    """bob pastes the provider's answer, its ids and his reason on his phone; the server restarts before he taps. The tap
    records nothing and ends on a page that says so, keeping what he typed through a mistyped password; signed in, he is
    back on the job with the same form open and filled in, and his tap (his passkey signs it) records it once."""
    from selenium.webdriver.support.ui import WebDriverWait

    store = new_store(pg_server, "alice")
    crashed_jobs(tmp_path, store, names=("journey",))
    s = serving(tmp_path, "--store", store)
    port = s.base.rsplit(":", 1)[1]
    base = f"http://localhost:{port}"
    driver = passkey_phone(phone)
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    phone_signs_in(driver, wait, base, "journey", "bob")
    registers_a_passkey(driver, wait)
    answer, reason = providers_answer(), "Found it in the provider's logs by its request id."
    driver.find_element("css selector", "#settle-complete summary").click()
    for name, value in answer.items():
        driver.execute_script(
            "arguments[0].value = arguments[1];", driver.find_element("css selector", f"#reconcile-complete [name={name}]"), value
        )
    driver.find_element("id", "complete-reason").send_keys(reason)

    code, _, _ = s.stop()  # the server restarts while the page is open
    assert code == 0
    serving(tmp_path, "--store", store, "--port", port)
    driver.find_element("css selector", "#reconcile-complete button[type=submit]").click()
    wait.until(lambda d: d.find_elements("id", "kept"))
    kept = text_of(driver, "kept")
    assert "Nothing was recorded" in driver.page_source and "Paste the provider's answer" in kept and reason in kept
    assert f"The answer you pasted ({len(answer['outputText'])} characters)" in kept and "Complete it" in kept
    assert store_counts(store, "call_events WHERE event = 'reconciled'") == [0]
    fits_a_phone(driver)

    driver.find_element("id", "role").send_keys("bob")
    driver.find_element("id", "password").send_keys("not-his-password")
    driver.find_element("css selector", "form button[type=submit]").click()  # a mistyped password keeps it all
    wait.until(lambda d: "did not accept" in d.page_source)
    driver.find_element("id", "password").send_keys(password_of("bob"))
    driver.find_element("css selector", "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == f"{base}/jobs/journey" and d.find_elements("id", "kept"))
    assert driver.find_element("id", "settle-complete").get_attribute("open") is not None  # the same way, open
    assert "tap Complete it to record it" in text_of(driver, "kept")
    filled = {n: driver.find_element("css selector", f"#reconcile-complete [name={n}]").get_attribute("value") for n in answer}
    assert filled == answer and driver.find_element("id", "complete-reason").get_attribute("value") == reason
    assert not driver.find_element("id", "abandon-reason").get_attribute("value")  # only that form
    assert store_counts(store, "call_events WHERE event = 'reconciled'") == [0]  # the sign-in recorded nothing: the tap does
    driver.find_element("css selector", "#reconcile-complete button[type=submit]").click()
    wait.until(lambda d: "Recorded: the call of item alpha completed by bob" in text_of(d, "said"))
    assert "signed with passkey" in text_of(driver, "said")
    assert store_counts(store, "call_events WHERE event = 'reconciled'") == [1]
