"""A phone never strands its reviewer: a restarted server, a lost session or an old page's token ends on a styled page
that says what happened, keeps what was typed, and signs in back to the same job with it filled in; nothing is
recorded without a fresh session. Real `serve`, real PostgreSQL, real Chromium at 390×844 (test_web's phone)."""

import json
import re
import shlex

import test_web
from test_web import csrf, fits_a_phone, phone_signs_in, post_form, shown_results, sign_in, store_counts, store_job, text_of

from conftest import Workspace, as_, new_store, password_of

serving = test_web.serving  # the fixture that starts serves and stops them after each test


def test_a_page_left_open_across_a_restart_then_accept_tapped_ends_on_a_sign_in_that_records_it_once(tmp_path, pg_server, serving, phone):
    from selenium.webdriver.support.ui import WebDriverWait

    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    port = s.base.rsplit(":", 1)[1]
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    reason = "Both summaries match their sources; checked on the train."
    phone_signs_in(driver, wait, s.base, "journey", "bob")
    wait.until(lambda d: d.find_elements("css selector", "button.accept"))
    at = driver.execute_script(  # where each part stands on the page (px from its top)
        "var m = document.querySelectorAll('main mark'), y = window.scrollY;"
        "return {jump: document.getElementById('jump').getBoundingClientRect().top + y,"
        " summary: document.querySelector('main section[id^=item]').getBoundingClientRect().top + y,"
        " lastQuote: m[m.length - 1].getBoundingClientRect().bottom + y,"
        " form: document.querySelector('#decide form').getBoundingClientRect().top + y}"
    )
    assert at["jump"] < at["summary"] < at["lastQuote"] < at["form"], at  # the summary and quotes first, then the decision
    digest = shown_results(driver.page_source)
    short = driver.find_element("css selector", "#meta details.id summary")
    assert digest not in short.text and short.text.startswith(digest[:14])  # shortened, the whole one tap away
    short.click()
    assert driver.find_element("css selector", "#meta details.id code.full").text == digest
    driver.find_element("id", "jump").click()
    driver.find_element("id", "reason").send_keys(reason)

    code, _, _ = s.stop()  # the server restarts while the page is open (a phone tab asleep meanwhile)
    assert code == 0
    serving(tmp_path, "--store", ws.store, "--port", port)
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: d.find_elements("id", "kept"))
    page = driver.page_source
    assert "form-urlencoded" not in page and "Nothing was recorded" in page and "the server restarted" in page
    assert text_of(driver, "kept").count("Accept") >= 1 and reason in text_of(driver, "kept")
    assert store_counts(ws.store, "decisions") == [0]  # nothing without a fresh session
    fits_a_phone(driver)
    driver.save_screenshot(str(tmp_path / "stranded-390x844.png"))

    driver.find_element("id", "role").send_keys("bob")
    driver.find_element("id", "password").send_keys("not-his-password")
    driver.find_element("css selector", "form button[type=submit]").click()  # a mistyped password keeps it all
    wait.until(lambda d: "did not accept" in d.page_source)
    assert driver.find_element("id", "role").get_attribute("value") == "bob" and reason in driver.page_source
    driver.find_element("id", "password").send_keys(password_of("bob"))
    driver.find_element("css selector", "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == f"{s.base}/jobs/journey" and d.find_elements("css selector", "button.accept"))
    assert driver.find_element("id", "reason").get_attribute("value") == reason  # filled in again
    assert "chosen" in driver.find_element("css selector", "button.accept").get_attribute("class")
    assert store_counts(ws.store, "decisions") == [0]  # the sign-in recorded nothing: the tap does
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: "Saved: accepted by bob (role bob)" in d.page_source)  # read whole: the page is being replaced
    assert store_counts(ws.store, "decisions", "receipts") == [1, 1]
    final = ws.run("inspect").ok()["final"]
    assert (final["decision"], final["principal"], final["reason"]) == ("accept", "bob", reason)


def test_an_expired_session_or_an_old_token_keeps_the_typed_decision_and_records_nothing(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    digest = shown_results(bob.get("/jobs/journey").text)
    fields = {"decision": "hold", "reviewer": "bob", "reason": "Wait for the Q3 figures.", "resultsSha256": digest}

    stale = bob.post("/jobs/journey/decision", data={**fields, "csrftoken": "an-old-pages-token"})  # a stale CSRF token
    assert stale.status_code == 403 and "form token is no longer valid" in stale.text and "Wait for the Q3 figures." in stale.text
    assert "<style" in stale.text and 'name="keep_decision" value="hold"' in stale.text

    assert post_form(bob, "/logout").status_code == 303  # the session is gone (as after --idle-minutes)
    lost = post_form(bob, "/jobs/journey/decision", **fields)
    assert lost.status_code == 401 and "Your session has ended" in lost.text and "Wait for the Q3 figures." in lost.text
    assert store_counts(ws.store, "decisions") == [0]

    kept = re.findall(r'name="(keep_\w+|next)" value="([^"]*)"', lost.text)
    back = bob.post("/login", data={"csrftoken": csrf(bob), "role": "bob", "password": password_of("bob"), **dict(kept)})
    assert back.status_code == 303 and back.headers["location"] == "/jobs/journey"
    page = bob.get("/jobs/journey").text
    assert "Wait for the Q3 figures.</textarea>" in page and "You chose <b>Hold</b>" in page
    assert store_counts(ws.store, "decisions") == [0]
    api = bob.post("/api/jobs/journey/sign", json={"command": "decide"}, headers={"x-csrftoken": "old"})
    assert api.status_code == 403 and api.json()["signedOut"] is True  # the page's script then sends the form as it is


# -- suggestions a role may follow: every "next" names only what its reader's principal may do, or who may ---------

OWNER_MAY = {"status", "inspect", "resume", "revise", "retry", "cancel", "reconcile", "verify", "jobs"}  # four eyes: no decide
REVIEWER_MAY = {"status", "inspect", "decide", "revise", "retry", "cancel", "reconcile", "verify", "jobs"}  # no resume


def suggested(text: str) -> set:
    """The commands an output suggests: each `durable_job.py COMMAND` (or `durable-job COMMAND`) it prints."""
    return set(re.findall(r"(?:durable_job\.py|durable-job)'? ([a-z]+) ", text))


def test_no_output_suggests_a_command_its_readers_role_is_refused(tmp_path, pg_server, serving):
    store = new_store(pg_server, "alice")
    alice = Workspace(tmp_path / "alice", store=store)
    alice.write_manifest(reviewers=["bob"])
    submitted = alice.run("submit", "--manifest", alice.manifest, "--store", store, state=False).ok()
    assert "waiting for a worker" in submitted["next"] and "WORKER_ROLE@" in submitted["next"]
    assert "alice@" not in submitted["next"].split("(or run it here")[0]  # not the worker told to use alice's address
    bob = as_(alice, "bob", tmp_path)
    waiting = bob.run("status").ok()
    assert waiting["phase"] == "not-started" and waiting["next"].startswith("waiting for a worker: its owner alice")
    assert suggested(waiting["next"]) <= REVIEWER_MAY
    s = serving(tmp_path, "--store", store)
    page = sign_in(s, "bob").get("/jobs/journey").text
    assert " resume " not in page and "waiting for a worker" in page

    started = alice.run("resume").ok()  # the owner runs it to review
    bundle = started["interrupt"][0]
    assert "decideCommand" not in bundle and bundle["decidedBy"].startswith("waiting for the review: bob decides")
    text = alice.run("resume", "--text").stdout + alice.run("status", "--text").stdout + alice.run("inspect", "--text").stdout
    assert "bob decides" in text and suggested(text) <= OWNER_MAY, suggested(text)
    for out in (alice.run("status").ok(), alice.run("inspect").ok()):
        assert suggested(json.dumps(out)) <= OWNER_MAY and "decideCommand" not in out

    reviewed = bob.run("status").ok()
    assert suggested(reviewed["next"]) == {"decide"}
    decided = paste_decision(bob, reviewed["next"])
    assert decided["final"]["principal"] == "bob"
    assert suggested(json.dumps(bob.run("status").ok()) + json.dumps(alice.run("status").ok())) <= OWNER_MAY & REVIEWER_MAY


def paste_decision(ws, command: str) -> dict:
    """bob pastes the decide he was shown, his choice and words in place of the placeholders."""
    words = shlex.split(command.replace("accept|reject|hold", "accept").replace("YOU", "Bob").replace("WHY", "read-it"))
    start = next(n for n, w in enumerate(words) if w == "decide")
    return ws.run(*words[start:], state=False).ok()
