"""Review from anywhere: `serve`, the live review web app, over real HTTP on loopback (and real Chromium in test_browser).

Every journey runs a real `serve` process; people sign in as they would (a store's role and its password, or the
one-time token `serve --root` prints), and every act is checked afterwards through the CLI and the store itself.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from conftest import (
    PROGRAM,
    RUN_PROGRAM,
    Workspace,
    as_role,
    clean_env,
    copy_program,
    in_the_engine,
    kill_group,
    new_store,
    openai_workspace,
    password_of,
    posted_at_once,
    read_marks,
    wait_for,
    wal_since,
)


class Serve:
    """A real `serve` subprocess on a free loopback port: the address it printed, its output, and a way to stop it.

    Started as `python tests/run_program.py PROGRAM serve …` (the script run, its compiled code kept between runs: a
    serve started as `python PROGRAM` compiled durable_job.py twice, 0.44 against 0.20 s to its address)."""

    def __init__(self, cwd, *args, env=None, program=None):
        full_env = clean_env()
        full_env.pop("PGPASSFILE", None)  # serve knows no password but the ones people type
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, RUN_PROGRAM, program or PROGRAM, "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=full_env,
            cwd=str(cwd),
            start_new_session=True,
        )
        self.err: list = []
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()
        wait_for(lambda: self.address or self.proc.poll() is not None, timeout=30)
        assert self.address, f"serve did not print its address: {''.join(self.err)}"
        self.base = self.address.split("?", 1)[0].rstrip("/")

    def _drain(self):
        for line in self.proc.stderr:
            self.err.append(line)

    @property
    def address(self) -> str | None:
        for line in self.err:
            found = re.search(r"open (https?://\S+)", line)
            if found:
                return found.group(1)
        return None

    def stop(self, sig=signal.SIGTERM, timeout=15) -> tuple:
        self.proc.send_signal(sig)
        out, _ = self.proc.communicate(timeout=timeout)
        self.reader.join(timeout=5)
        return self.proc.returncode, out, "".join(self.err)

    def kill(self):
        if self.proc.poll() is None:
            kill_group(self.proc)
            self.proc.wait(timeout=10)

    def client(self, **kw) -> httpx.Client:
        """A browser-like client. serve (uvicorn) closes a kept-alive connection idle for 5 s; a client that sends on one
        idle just as long races that close ("Server disconnected without sending a response": a CI run here failed on
        it once), where a browser would send again. This one lets its idle connections go after 2 s."""
        kw.setdefault("limits", httpx.Limits(keepalive_expiry=2.0))
        kw.setdefault("headers", {"Origin": self.base})  # as a browser sends with every POST from serve's own page
        return httpx.Client(base_url=self.base, follow_redirects=False, timeout=30, **kw)


@pytest.fixture
def serving(request):
    """Start serves for a test; every one is stopped after it."""
    started = []

    def start(*args, **kw) -> Serve:
        s = Serve(*args, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()


def csrf(client: httpx.Client) -> str:
    """The CSRF token kept in this client's session, as its pages' forms carry it (the sign-in form's, or, in a
    --root serve, the sign-out form's)."""
    for path in ("/login", "/"):
        found = re.search(r'name="csrftoken" value="([^"]+)"', client.get(path).text)
        if found:
            return found.group(1)
    raise AssertionError("no page of serve showed this client a form token")


def sign_in(s: Serve, role: str, password: str | None = None) -> httpx.Client:
    """A browser-like client signed in to a store serve as role (the form a person fills in)."""
    c = s.client()
    token = csrf(c)
    r = c.post("/login", data={"csrftoken": token, "role": role, "password": password or password_of(role), "next": "/"})
    assert r.status_code == 303, r.text
    return c


def post_form(c: httpx.Client, path: str, **fields) -> httpx.Response:
    return c.post(path, data={"csrftoken": csrf(c), **fields})


def live_state(html: str) -> str:
    return re.search(r'id="live-state">([^<]*)<', html).group(1)


def shown_results(html: str) -> str:
    return re.search(r'data-results="([0-9a-f]{64})"', html).group(1)


def events(c: httpx.Client, path: str, count: int, timeout=20.0) -> list:
    """The first `count` data events of an event stream, as JSON."""
    got = []
    with c.stream("GET", path, timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                got.append(json.loads(line[6:]))
                if len(got) == count:
                    break
    return got


def store_counts(store: str, *tables: str) -> list:
    """How many rows each table of the store holds, as its administrator counts them (through psql)."""
    query = "SELECT " + ", ".join(f"(SELECT count(*) FROM durable_job.{t})" for t in tables)
    out = subprocess.run(["psql", "-XAt", as_role(store, "durable"), "-c", query], capture_output=True, text=True, check=True)
    return [int(n) for n in out.stdout.strip().split("|")]


def bob_revises(ws: Workspace, tmp_path, summary: str) -> dict:
    """bob, at a terminal, edits item alpha of the job (the CLI's revise, as bob) while a page may be open."""
    path = tmp_path / "summary.txt"
    path.write_text(summary + "\n")
    flags = [
        "--summary-file",
        str(path),
        "--reviewer",
        "Bob",
        "--reason",
        "clearer",
        "--store",
        as_role(ws.store, "bob"),
        "--job",
        "journey",
    ]
    return ws.run("revise", "--item", "alpha", *flags, state=False).ok()


def store_job(tmp_path, pg_server, **overrides) -> Workspace:
    """alice's job in a fresh store, waiting for review by bob (sealed by alice, run by her start)."""
    ws = Workspace(tmp_path, store=new_store(pg_server, "alice"))
    ws.write_manifest(reviewers=["bob"], **overrides)
    ws.start().ok()
    return ws


# -- one person's state directories: the printed one-time address ---------------------------------------------------


def test_a_person_opens_the_printed_address_reviews_and_decides_once(tmp_path, serving):
    ws = Workspace(tmp_path)
    ws.write_manifest()
    ws.start().ok()
    s = serving(tmp_path, "--root", str(tmp_path))
    assert "?token=" in s.address and s.address.startswith("http://127.0.0.1:")
    browser = s.client()
    r = browser.get("/?" + s.address.split("?", 1)[1])
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and "secure" not in cookie.lower()
    assert s.client().get("/?" + s.address.split("?", 1)[1]).status_code == 401  # one time only
    assert "can sign in once at: http://127.0.0.1:" in "".join(s.err)  # the next device's address
    listing = browser.get("/").text
    assert "Waiting for you (1)" in listing and "/jobs/journey" in listing
    page = browser.get("/jobs/journey")
    assert page.status_code == 200 and live_state(page.text) == "Awaiting review: draft 1"
    assert "<mark id='q0-0'>" in page.text and "unsigned" in page.text and "tokens: " in page.text
    assert "script-src 'nonce-" in page.headers["content-security-policy"] and page.headers["cache-control"] == "no-store"
    digest = shown_results(page.text)
    assert digest == ws.run("inspect").ok()["resultsSha256"]

    r = browser.post("/jobs/journey/decision", data={"decision": "accept", "reviewer": "Dana", "reason": "ok", "resultsSha256": digest})
    assert r.status_code == 403  # no CSRF token: refused before anything reads the form
    assert ws.run("status").ok()["phase"] == "awaiting-review"

    fields = {"decision": "accept", "reviewer": "Dana", "reason": "read it all", "resultsSha256": digest}
    assert post_form(browser, "/jobs/journey/decision", **fields).status_code == 303
    page = browser.get("/jobs/journey").text
    assert live_state(page).startswith("Saved: accepted by Dana (account ") and "Recorded: accept by Dana" in page
    assert post_form(browser, "/jobs/journey/decision", **fields).status_code == 303  # a second tap
    assert "Already recorded: accept by Dana" in browser.get("/jobs/journey").text
    post_form(browser, "/jobs/journey/decision", **{**fields, "decision": "reject"})
    assert "Refused: Final decision already recorded: accept by Dana" in browser.get("/jobs/journey").text
    assert len(ws.journal("SELECT * FROM decisions")) == 1
    final = ws.run("inspect").ok()["final"]
    assert (final["decision"], final["reviewer"], final["signature"]) == ("accept", "Dana", None)
    again = ws.run("decide", "--decision", "accept", "--reviewer", "Dana", "--reason", "read it all")
    assert again.ok()["existing"] is True and again.ok()["final"] == final  # the CLI answers a repeat the same way
    ws.run("decide", "--decision", "accept", "--reviewer", "Dana", "--reason", "again").held("Final decision already recorded")
    assert ws.run("verify").ok()["ok"] is True
    code, out, err = s.stop()
    assert code == 0 and json.loads(out)["stoppedBy"] == "SIGTERM"


def root_browser(s: Serve) -> httpx.Client:
    """A browser signed in to a --root serve by its printed one-time address."""
    browser = s.client()
    assert browser.get("/?" + s.address.split("?", 1)[1]).status_code == 303
    return browser


def test_a_failed_item_is_retried_and_the_job_cancelled_from_the_page(tmp_path, provider, serving):
    ws = openai_workspace(Workspace(tmp_path), provider)
    provider.behave(by_input={"Alpha report": "not-json"})
    assert [r["status"] for r in ws.start().ok()["results"]] == ["failed", "validated"]
    s = serving(tmp_path, "--root", str(tmp_path), env=provider.env())
    browser = root_browser(s)
    page = browser.get("/jobs/journey").text
    assert "not valid JSON" in page and "The model's raw output" in page and "Retry alpha" in page
    assert 'button type="submit" name="decision" value="accept"' in page  # offered; refused while an item failed
    provider.behave("ok")
    post_form(browser, "/jobs/journey/retry", item="alpha", reviewer="me", reason="once more", resultsSha256=shown_results(page))
    page = browser.get("/jobs/journey").text
    assert "Recorded: draft 2 of item alpha" in page and live_state(page) == "Awaiting review: draft 2"
    assert len(provider.requests()) == 3  # the retry's one call, and nothing else
    post_form(browser, "/jobs/journey/cancel", reviewer="Dana", reason="not needed")
    page = browser.get("/jobs/journey").text
    assert live_state(page).startswith("Cancelled by Dana (account ") and "/decision" not in page and "/cancel" not in page
    assert ws.run("status").ok()["phase"] == "cancelled" and ws.run("verify").ok()["ok"] is True


def uncertain_under_root(tmp_path, serving) -> tuple[Workspace, str, httpx.Client]:
    """A job whose first call was left pending by a kill, served under --root; the account signed in to the page."""
    ws = Workspace(tmp_path)
    ws.write_manifest()
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.run("status").ok()["calls"][0][0]
    return ws, key, root_browser(serving(tmp_path, "--root", str(tmp_path)))


def test_an_uncertain_call_is_said_in_plain_words_and_abandoned_from_the_page_then_the_job_goes_on(tmp_path, serving):
    """Under --root: the call's item, since when, where it went, the request id to look for (the key, one tap away, not
    in bold), tokens unknown; the account abandons it from the page (no passkey: unsigned), once; resume then runs it."""
    ws, key, browser = uncertain_under_root(tmp_path, serving)
    page = browser.get("/jobs/journey").text
    assert live_state(page) == "Needs a person: a call with no known outcome"
    said = re.search(r'<ul class="said" id="uncertain-said">(.*?)</ul>', page, re.S).group(1)
    assert said.count("<li>") == 6 and "<b>alpha</b>" in said and "Tokens: unknown" in said
    section = page.split('id="uncertain"')[1].split("</section>")[0]
    assert f"<code class='full'>{key}</code>" in said and f"<code>{key[:8]}" in said  # clipped, the whole one tap away
    assert section.count(key) == 2 + section.count(f'value="{key}"')  # the tap's summary title and the full id; the forms'
    assert f"<b>{key}" not in page and "<code class='cmd'>" not in section and " reconcile " not in section
    journal = page.split("<section id='journal'>")[1].split("</section>")[0]  # further down: the call's row says where to settle it
    assert "Outcome unknown: <a href='#uncertain'>the box above</a> says how it is settled." in journal
    assert "reconcile" not in journal and "<code class='cmd'>" not in journal and "usage records" not in journal
    assert journal.count(key) == 2 and f"<code class='full'>{key}</code>" in journal  # the key clipped, the whole one tap away
    ws.run("inspect", "--html", str(tmp_path / "review.html")).ok()  # a terminal's review page keeps the command to paste
    assert f"--operation-key {key} --action" in (tmp_path / "review.html").read_text().split("id='journal'")[1]
    fields = {"operationKey": key, "action": "abandon", "reviewer": "Dana", "reason": "no usage at the provider"}
    assert post_form(browser, "/jobs/journey/reconcile", **{**fields, "action": "nothing"}).status_code == 400
    pasted = {**fields, "action": "complete", "outputText": " ", "responseId": "resp_1"}  # checked as a --response-file is
    assert post_form(browser, "/jobs/journey/reconcile", **pasted).status_code == 303
    refused = browser.get("/jobs/journey").text
    assert "Refused: The pasted response needs a non-empty string outputText" in refused
    assert '<details class="settle" id="settle-complete" open>' in refused and 'value="resp_1"' in refused  # kept, to fix
    assert ">no usage at the provider</textarea>" in refused and 'id="kept"' not in refused
    assert post_form(browser, "/jobs/journey/reconcile", **fields).status_code == 303
    done = browser.get("/jobs/journey").text
    assert "Recorded: the call of item alpha abandoned by Dana" in done and "unsigned" in done and 'id="uncertain"' not in done
    assert post_form(browser, "/jobs/journey/reconcile", **fields).status_code == 303  # the same tap again
    assert "Already recorded: the call of item alpha abandoned by Dana" in browser.get("/jobs/journey").text
    assert ws.db_rows("SELECT count(*) FROM call_events WHERE event = 'reconciled'") == [(1,)]
    assert ws.run("resume").ok()["interrupt"]  # the job goes on: its next run reaches review
    assert ws.run("verify").ok()["ok"] is True
    ws.run("verify", "--strict").held("reconciliation unsigned", "reconcile --sign-key PATH, or a passkey on the page")


def test_a_live_refresh_between_an_act_and_its_page_takes_neither_what_the_act_said_nor_what_was_kept(tmp_path, serving):
    """The page's script fetches the page again when the job changes (app.js swap, X-Durable-Job-Refresh: 1). From the
    page the person just left, such a refresh can reach the server between their act and the page it leads to (seen
    under load: the phone's "Resumed" line lost to it). What the act said, and a refused form's values kept to fix, are
    for the person's next page, never for a refresh."""
    ws, key, browser = uncertain_under_root(tmp_path, serving)
    refresh = {"X-Durable-Job-Refresh": "1", "Accept": "text/html"}
    fields = {"operationKey": key, "action": "abandon", "reviewer": "Dana", "reason": "no usage at the provider"}
    pasted = {**fields, "action": "complete", "outputText": " ", "responseId": "resp_1"}
    assert post_form(browser, "/jobs/journey/reconcile", **pasted).status_code == 303
    assert "Refused:" not in browser.get("/jobs/journey", headers=refresh).text
    refused = browser.get("/jobs/journey").text
    assert "Refused: The pasted response needs a non-empty string outputText" in refused and 'value="resp_1"' in refused
    assert post_form(browser, "/jobs/journey/reconcile", **fields).status_code == 303
    assert "Recorded:" not in browser.get("/jobs/journey", headers=refresh).text
    assert "Recorded: the call of item alpha abandoned by Dana" in browser.get("/jobs/journey").text
    assert "Recorded:" not in browser.get("/jobs/journey").text  # shown once


def test_a_cross_site_post_carries_no_session(tmp_path, serving):
    """(An idle session's sign-out: tests/test_web_hostile.py, at the shortest --idle-minutes.)"""
    ws = Workspace(tmp_path)
    ws.write_manifest()
    ws.start().ok()
    s = serving(tmp_path, "--root", str(tmp_path))
    browser = s.client()
    browser.get("/?" + s.address.split("?", 1)[1])
    digest = shown_results(browser.get("/jobs/journey").text)
    # a form on another site: the browser sends no SameSite=Strict cookie with it, so it carries no session
    other = httpx.post(
        f"{s.base}/jobs/journey/decision",
        data={"decision": "hold", "reviewer": "x", "reason": "y", "resultsSha256": digest},
        headers={"Origin": "https://elsewhere.example"},
    )
    assert other.status_code == 403
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_serve_refuses_what_would_expose_passwords_or_cannot_listen(tmp_path):
    def held(*args):
        proc = subprocess.run(
            [sys.executable, RUN_PROGRAM, PROGRAM, "serve", *args], capture_output=True, text=True, env=clean_env(), timeout=60
        )
        assert proc.returncode == 2 and proc.stderr.startswith("HOLD: ") and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr

    assert "not a loopback address" in held("--root", str(tmp_path), "--host", "0.0.0.0")
    assert "go together" in held("--root", str(tmp_path), "--certfile", PROGRAM)
    assert "--store URL" in held()
    assert "is not a folder" in held("--root", str(tmp_path / "missing"))
    assert "from 0.5 (thirty seconds) to 1440" in held("--root", str(tmp_path), "--idle-minutes", "0.4")
    with __import__("socket").socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert "give another --port" in held("--root", str(tmp_path), "--port", str(busy.getsockname()[1]))


def test_serve_over_tls_sets_secure_cookies(tmp_path, serving):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
    )
    s = serving(tmp_path, "--root", str(tmp_path), "--certfile", str(cert), "--keyfile", str(key))
    assert s.address.startswith("https://127.0.0.1:")
    r = httpx.get(s.address, verify=False)
    assert r.status_code == 303 and "secure" in r.headers["set-cookie"].lower()


def test_a_job_sealed_by_another_program_is_shown_read_only(tmp_path, serving):
    ws = Workspace(tmp_path)
    ws.write_manifest()
    os.makedirs(tmp_path / "other")
    other = copy_program(tmp_path / "other", lambda text: in_the_engine(text, "# another release"))
    ws.run("start", "--manifest", ws.manifest, program=other).ok()
    s = serving(tmp_path, "--root", str(tmp_path))
    browser = s.client()
    browser.get("/?" + s.address.split("?", 1)[1])
    page = browser.get("/jobs/journey").text
    assert "Read-only here: Engine changed" in page and "/decision" not in page
    digest = shown_results(page)
    post_form(browser, "/jobs/journey/decision", decision="accept", reviewer="x", reason="y", resultsSha256=digest)
    assert "Refused: Engine changed" in browser.get("/jobs/journey").text
    assert ws.run("status", program=other).ok()["phase"] == "awaiting-review"


# -- a team's store: each person signs in as their own role ---------------------------------------------------------


def test_people_sign_in_as_their_roles_and_see_and_do_only_what_they_may(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    wrong = s.client()
    r = wrong.post("/login", data={"csrftoken": csrf(wrong), "role": "bob", "password": "not-his", "next": "/"})
    assert r.status_code == 401 and "did not accept that role and password" in r.text
    empty = s.client()
    assert empty.post("/login", data={"csrftoken": csrf(empty), "role": "bob", "password": ""}).status_code == 401  # never pgpass

    elsewhere = s.client()
    r = elsewhere.post(
        "/login", data={"csrftoken": csrf(elsewhere), "role": "carol", "password": password_of("carol"), "next": "/\\evil.example"}
    )
    assert r.status_code == 303 and r.headers["location"] == "/"  # a sign-in returns to this app only
    carol = sign_in(s, "carol")
    assert "Waiting for you (0)" in carol.get("/").text and "journey" not in carol.get("/").text
    hidden, unknown = carol.get("/jobs/journey"), carol.get("/jobs/no-such-job")
    assert hidden.status_code == unknown.status_code == 404

    def alike(r):
        return re.sub(r"nonce=\"[^\"]+\"", "", r.text).replace("journey", "X").replace("no-such-job", "X")

    assert alike(hidden) == alike(unknown)  # an invisible job and no job look the same
    assert carol.get("/api/jobs/journey").status_code == 404 and carol.get("/api/jobs").json() == {"jobs": []}

    digest = ws.run("inspect").ok()["resultsSha256"]
    api = {"decision": "accept", "reason": "mine", "resultsSha256": digest, "reviewer": "Alice"}
    alice = sign_in(s, "alice")
    headers = {"x-csrftoken": csrf(alice)}
    assert alice.post("/api/jobs/journey/decision", json=api, headers=headers).status_code == 403  # the owner, not its reviewer
    assert (
        alice.post("/api/jobs/journey/decision", content=json.dumps(api), headers={**headers, "content-type": "text/plain"}).status_code
        == 415
    )

    bob = sign_in(s, "bob")
    headers = {"x-csrftoken": csrf(bob)}
    assert "Waiting for you (1)" in bob.get("/").text
    assert bob.post("/api/jobs/journey/decision", json=api).status_code == 403  # JSON without the CSRF header
    stale = bob.post("/api/jobs/journey/decision", json={**api, "resultsSha256": "0" * 64}, headers=headers)
    assert stale.status_code == 409 and stale.json()["resultsSha256"] == digest
    decided = bob.post("/api/jobs/journey/decision", json={**api, "reviewer": "Bob B."}, headers=headers)
    assert decided.status_code == 200 and decided.json()["final"]["principal"] == "bob"
    again = bob.post("/api/jobs/journey/decision", json={**api, "reviewer": "Bob B."}, headers=headers).json()
    assert again["existing"] is True and again["final"] == decided.json()["final"]
    job = bob.get("/api/jobs/journey").json()
    assert job["phase"] == "decided" and job["final"]["reviewer"] == "Bob B." and "next" in job
    assert store_counts(ws.store, "decisions", "receipts") == [1, 1]
    assert ws.run("verify").ok()["ok"] is True
    assert post_form(carol, "/logout").status_code == 303
    assert carol.get("/").status_code == 303 and carol.get("/api/jobs").status_code == 401  # signed out: the cookie opens nothing
    pages = bob.get("/").text + bob.get("/jobs/journey").text + decided.text + bob.get("/api/jobs").text
    code, out, err = s.stop()
    assert code == 0
    for role in ("alice", "bob", "carol"):  # no password reaches an output or a page
        assert password_of(role) not in out + err + pages


def test_a_server_accounts_own_pgpass_signs_no_one_in(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store, env={"PGPASSFILE": os.environ["PGPASSFILE"]})  # it knows every role's password
    for password in ("", "wrong"):
        c = s.client()
        r = c.post("/login", data={"csrftoken": csrf(c), "role": "bob", "password": password, "next": "/"})
        assert r.status_code == 401 and "sid" not in str(c.cookies), password
    assert sign_in(s, "bob").get("/api/jobs").json()["jobs"][0]["jobId"] == "journey"  # his own password does


def test_the_web_apps_reads_change_nothing_in_the_store(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    bob.get("/")  # the first reads open bob's connection: from here on only reads
    before = read_marks(ws.store)
    for path in ("/", "/jobs/journey", "/api/jobs", "/api/jobs/journey"):
        assert bob.get(path).status_code == 200, path
    assert events(bob, "/api/jobs/journey/events", 1)[0]["phase"] == "awaiting-review"
    after = read_marks(ws.store)
    assert (after["xid"], after["objects"]) == (before["xid"], before["objects"])  # no transaction id, no object made
    assert wal_since(ws.store, before) < 64 * 1024


def test_double_submit_records_one_decision_and_one_receipt(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    digest = shown_results(bob.get("/jobs/journey").text)
    token = csrf(bob)
    fields = {"csrftoken": token, "decision": "accept", "reviewer": "Bob", "reason": "twice", "resultsSha256": digest}
    answers = posted_at_once(bob, "/jobs/journey/decision", fields, 3)
    assert [a.status_code for a in answers] == [303, 303, 303]
    assert store_counts(ws.store, "decisions", "receipts") == [1, 1]


def test_a_stale_accept_from_the_page_is_refused_and_the_new_version_shown(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    shown = shown_results(bob.get("/jobs/journey").text)
    revised = bob_revises(ws, tmp_path, "Alpha, as bob rewrote it.")
    post_form(bob, "/jobs/journey/decision", decision="accept", reviewer="Bob", reason="ok", resultsSha256=shown)
    page = bob.get("/jobs/journey").text
    assert "Not recorded: the job changed since you opened it (draft 2: item alpha changed by Bob (role bob), “clearer”)" in page
    assert "The page now shows the current version, with your reason kept below" in page and ">ok</textarea>" in page
    shown_text = re.sub(r"<details.*?</details>|(value|data-results|title)=(\"|')[0-9a-f]{64}(\"|')", "", page, flags=re.S)
    assert not re.search(r"[0-9a-f]{64}", shown_text) and "--results-sha256" not in page  # no CLI words; a hash shown short
    assert shown_results(page) == revised["resultsSha256"] != shown and "draft 2" in page and "as bob rewrote it" in page
    post_form(
        bob,
        "/jobs/journey/revise",
        item="beta",
        summary="Beta, from an old page.",
        citations="",
        reviewer="bob",
        reason="x",
        resultsSha256=shown,
    )
    assert "Not recorded: the job changed since you opened it" in bob.get("/jobs/journey").text  # an edit is bound too
    post_form(
        bob,
        "/jobs/journey/revise",
        item="beta",
        summary="Beta, from the page.",
        citations="",
        reviewer="bob",
        reason="x",
        resultsSha256=revised["resultsSha256"],
    )
    page = bob.get("/jobs/journey").text
    assert "Recorded: draft 3 of item beta" in page and "Beta, from the page." in page
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_each_page_bob_opens_after_his_edit_shows_it_before_the_stores_notification_is_read(tmp_path, pg_server, serving):
    """A page's script swaps in a fresh page when its event stream says the job differs from what it shows: a stream
    opened just after bob's own act must say what that act recorded (serve re-reads on the act itself, not only once
    the store's notification comes round), or his page flips back to the draft before it and loses its "Recorded" line."""
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    for n in range(2, 8):
        shown = events(bob, "/api/jobs/journey/events", 1)[0]  # this stream's read is what serve holds for bob now
        assert shown["draftVersion"] == n - 1, shown
        r = post_form(
            bob,
            "/jobs/journey/revise",
            item="beta",
            summary=f"Beta, edit {n}.",
            citations="",
            reviewer="bob",
            reason="x",
            resultsSha256=shown["resultsSha256"],
        )
        assert r.status_code == 303
        assert f"Recorded: draft {n} of item beta" in bob.get("/jobs/journey").text
        now = events(bob, "/api/jobs/journey/events", 1)[0]
        assert now["draftVersion"] == n and now["resultsSha256"] != shown["resultsSha256"], (n, now)


def test_the_page_is_told_of_a_cli_decision_and_of_the_database_going_away(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    seen: list = []
    done = threading.Event()

    def follow():
        try:
            with bob.stream("GET", "/api/jobs/journey/events", timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        seen.append((time.monotonic(), json.loads(line[6:])))
                        if done.is_set():
                            return
        except httpx.HTTPError:
            pass

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    wait_for(lambda: seen, timeout=20)
    assert seen[0][1]["status"] == "Awaiting review: draft 1"
    bob_url = as_role(ws.store, "bob")
    ws.run(
        "decide", "--decision", "hold", "--reviewer", "Bob", "--reason", "later", "--store", bob_url, "--job", "journey", state=False
    ).ok()
    decided_at = time.monotonic()  # the decision committed (the CLI's own start-up is not the page's delay)

    def next_event(after: int, predicate, timeout=20):
        wait_for(lambda: any(predicate(e) for _, e in seen[after:]), timeout=timeout)
        return next(n for n, (_, e) in enumerate(seen) if n >= after and predicate(e))

    saved = next_event(1, lambda e: e["status"].startswith("Saved: held by Bob (role bob)"))
    assert seen[saved][1]["phase"] == "decided" and seen[saved][0] - decided_at < 5
    on_the_way = [e for _, e in seen[1:saved]]  # the decision's row, its checkpoint, then its receipt: each may show
    assert all(e["phase"] in ("awaiting-review", "deciding", "decided") and not e["status"].startswith("Saved") for e in on_the_way)
    pg_server.stop()
    try:
        unknown = next_event(saved + 1, lambda e: e["status"] == "Status unknown")
        assert seen[unknown][1]["phase"] is None and "cannot be reached" in seen[unknown][1]["detail"]
        page = bob.get("/jobs/journey")
        assert page.status_code == 503 and "The store cannot be reached since" in page.text
    finally:
        pg_server.start_again()
    back = next_event(unknown + 1, lambda e: e["status"].startswith("Saved: held by Bob"), timeout=30)  # under bob's own policies
    assert seen[back][1]["resultsSha256"] == seen[0][1]["resultsSha256"]
    done.set()


def test_many_open_pages_hold_no_more_connections_than_one(tmp_path, pg_server, serving):
    store = new_store(pg_server, "alice")
    for n in range(3):
        ws = Workspace(tmp_path / f"j{n}", store=store)
        ws.write_manifest(jobId=f"job-{n}", reviewers=["bob"])
        ws.start().ok()
    s = serving(tmp_path, "--store", store)
    bob = sign_in(s, "bob")

    def serve_connections() -> int:
        out = subprocess.run(
            [
                "psql",
                "-XAt",
                as_role(store, "durable"),
                "-c",
                f"SELECT count(*) FROM pg_stat_activity WHERE application_name IN ('durable_job read {s.proc.pid}', 'durable_job serve {s.proc.pid}')",
            ],
            capture_output=True,
            text=True,
        )
        return int(out.stdout.strip())

    stop = threading.Event()

    def hold_open(job):
        try:
            with bob.stream("GET", f"/api/jobs/{job}/events", timeout=60) as r:
                for _ in r.iter_lines():
                    if stop.is_set():
                        return
        except httpx.HTTPError:  # serve stopped under it at the end of the test
            pass

    def opened(n_pages, settled):
        threads = [threading.Thread(target=hold_open, args=(f"job-{n % 3}",), daemon=True) for n in range(n_pages)]
        for t in threads:
            t.start()
        settled()
        return serve_connections()

    # one page: until serve holds its two connections (the listener starts a moment after the page's first event)
    one = opened(1, lambda: wait_for(lambda: serve_connections() >= 2, timeout=30, interval=0.1))
    many = opened(12, lambda: time.sleep(2.5))  # twelve more: time for a connection of their own, were one made for each
    assert one == many == 2  # bob's read connection and the one listener, however many pages
    code, out, _ = s.stop(signal.SIGINT)  # Ctrl-C with 13 event streams open
    assert code == 0 and json.loads(out)["stoppedBy"] == "SIGINT"
    stop.set()


# -- a reviewer's phone: real Chromium through chromedriver, at 390×844 ------------------------------------------------


def phone_signs_in(driver, wait, base: str, job: str, role: str) -> None:
    """On the phone: open the job's page, sign in as role on the form it shows, and wait to be back on the job's page."""
    driver.get(f"{base}/jobs/{job}")
    driver.find_element("id", "role").send_keys(role)
    driver.find_element("id", "password").send_keys(password_of(role))
    driver.find_element("css selector", "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == f"{base}/jobs/{job}")


def text_of(driver, element_id: str) -> str:
    """The element's text, read in one script: while a form's answer replaces the page, a found element's node can
    leave the document between finding it and reading it (Chromium: "Node with given id does not belong to the
    document"), and a wait would end on that error; read in the page itself there is no such gap. "" when absent."""
    return driver.execute_script("const e = document.getElementById(arguments[0]); return e ? e.innerText : ''", element_id)


def fits_a_phone(driver) -> None:
    """Nothing scrolls sideways, and every button (and the list's job links) is a target at least 44 px tall."""
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] == 390, width
    small = driver.execute_script(
        "return Array.from(document.querySelectorAll('button, a.btn, a.job, summary.btn, input[type=submit]'))"
        ".filter(e => e.offsetParent !== null && e.getBoundingClientRect().height < 44).map(e => e.outerHTML.slice(0, 80))"
    )
    assert small == [], small


def test_a_reviewer_follows_and_decides_a_job_from_a_phone(tmp_path, pg_server, provider, serving, phone):
    from selenium.webdriver.support.ui import WebDriverWait

    ws = Workspace(tmp_path, store=new_store(pg_server, "alice"))
    ws.write_manifest(mode="openai", model="gpt-test", reviewers=["bob"])
    ws.env.update(provider.env(DURABLE_JOB_OPENAI_TIMEOUT="20"))
    provider.behave("held")  # the first call is answered once the page has shown the job generating
    s = serving(tmp_path, "--store", ws.store)
    port = s.base.rsplit(":", 1)[1]
    driver = phone
    wait = WebDriverWait(driver, 30, poll_frequency=0.1)
    driver.get(f"{s.base}/jobs/journey")  # not signed in: the sign-in form, which returns here
    driver.find_element("id", "role").send_keys("bob")
    driver.find_element("id", "password").send_keys(password_of("bob"))
    driver.find_element("css selector", "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == f"{s.base}/jobs/journey")
    assert "No job" in driver.page_source  # not started yet: the same answer as any job bob cannot see
    run = ws.popen("start", "--manifest", ws.manifest)
    driver.get(f"{s.base}/jobs/journey")  # the job's address is stable: it shows the job once it exists
    while "No job" in driver.page_source:
        time.sleep(0.2)
        driver.refresh()
    driver.execute_script("window.notReloaded = true")
    wait.until(lambda d: text_of(d, "live-state").startswith("Generating"))
    provider.release()
    wait.until(lambda d: text_of(d, "live-state") == "Awaiting review: draft 1")
    assert run.wait(timeout=60) == 0
    wait.until(lambda d: d.find_elements("css selector", "button.accept"))
    assert driver.execute_script("return window.notReloaded") is True  # pushed to the page, not reloaded
    fits_a_phone(driver)
    driver.save_screenshot(str(tmp_path / "job-page-390x844.png"))

    bob_revises(ws, tmp_path, "Alpha, as Bob put it from his desk.")
    wait.until(lambda d: d.find_element("id", "changed").is_displayed())  # the page says so, and keeps what was shown
    driver.find_element("id", "reason").send_keys("Read both items.")
    driver.find_element("css selector", "button.accept").click()
    wait.until(lambda d: "the job changed since you opened it" in d.page_source)
    assert driver.find_element("id", "reason").get_attribute("value") == "Read both items."  # kept
    driver.find_element("id", "reason").clear()
    assert "draft 2" in driver.page_source and "as Bob put it from his desk" in driver.page_source
    driver.find_element("id", "reason").send_keys("Read the new version.")
    driver.execute_script("var b = document.querySelector('button.accept'); b.click(); b.click();")  # a double tap
    wait.until(lambda d: text_of(d, "live-state").startswith("Saved: accepted by bob (role bob)"))
    assert store_counts(ws.store, "decisions", "receipts") == [1, 1]
    fits_a_phone(driver)

    code, _, _ = s.stop()
    assert code == 0
    wait.until(lambda d: text_of(d, "live-state").startswith("Status unknown since "))
    serving(tmp_path, "--store", ws.store, "--port", port)  # back on the same address, knowing no session
    wait.until(lambda d: d.find_elements("link text", "Sign in again"))
    driver.find_element("link text", "Sign in again").click()
    driver.find_element("id", "role").send_keys("bob")
    driver.find_element("id", "password").send_keys(password_of("bob"))
    driver.find_element("css selector", "form button[type=submit]").click()
    wait.until(lambda d: d.current_url == f"{s.base}/jobs/journey")
    assert text_of(driver, "live-state").startswith("Saved: accepted by bob (role bob)")  # the saved status
    driver.get(f"{s.base}/")
    assert "journey" in driver.page_source
    fits_a_phone(driver)
    driver.save_screenshot(str(tmp_path / "list-page-390x844.png"))
