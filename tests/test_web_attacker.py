"""`serve` against a page on another port of the same host, and against a body too large to hold or too slow to come.

Cookies ignore the port, and a request from localhost:OTHER is same-site: a SameSite=Strict session cookie goes
with it, and such a page can overwrite any cookie serve set that is not HttpOnly. So serve checks, for every POST,
that it came from serve's own origin and carries the token kept in the person's own session. Real `serve`
processes over real HTTP on loopback (tests/test_web.py's helpers), and one real Chromium.
"""

import select
import socket
import time
from urllib.parse import urlsplit

import httpx
import test_web
from test_web import csrf, post_form, shown_results, sign_in, store_counts, store_job

from conftest import password_of, wait_for

serving = test_web.serving  # the fixture that starts serves and stops them after each test

SESSION_COOKIE = "durable_job_session"
OTHER_ORIGIN = "http://127.0.0.1:1"  # another port of serve's own host: same-site, not same-origin


def decision_fields(bob: httpx.Client, token: str | None = None) -> dict:
    digest = shown_results(bob.get("/jobs/journey").text)
    return {
        **({"csrftoken": token} if token is not None else {}),
        "decision": "reject",
        "reviewer": "bob",
        "reason": "forged",
        "resultsSha256": digest,
    }


def test_a_token_from_another_session_is_refused_even_with_its_cookie_tossed_in(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    mallory = s.client()  # anyone: the sign-in page hands out a token without signing in
    theirs = csrf(mallory)
    fields = decision_fields(bob, theirs)
    # the page on another port overwrote bob's token cookie with its own (a double-submit check then matches) and
    # sends bob's session cookie along; even from serve's own origin, the token is not the one in bob's session
    cookies = f"{SESSION_COOKIE}={bob.cookies[SESSION_COOKIE]}; csrftoken={mallory.cookies.get('csrftoken', theirs)}"
    forged = httpx.post(f"{s.base}/jobs/journey/decision", data=fields, headers={"Origin": s.base, "Cookie": cookies})
    assert forged.status_code == 403 and "form token is no longer valid" in forged.text
    assert 'name="keep_decision" value="reject"' in forged.text  # what was typed is shown, nothing recorded
    api = httpx.post(
        f"{s.base}/api/jobs/journey/sign", json={"command": "decide"}, headers={"Origin": s.base, "Cookie": cookies, "x-csrftoken": theirs}
    )
    assert api.status_code == 403 and api.json()["signedOut"] is True
    assert store_counts(ws.store, "decisions") == [0]
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_a_post_from_another_origin_is_refused_even_with_the_persons_own_token(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    fields = decision_fields(bob, csrf(bob))
    other = bob.post("/jobs/journey/decision", data=fields, headers={"Origin": OTHER_ORIGIN})
    assert other.status_code == 403 and "another page than serve" in other.text
    for origin in ("null", s.base.replace("http://", "https://"), s.base + ".evil.example"):
        assert bob.post("/jobs/journey/decision", data=fields, headers={"Origin": origin}).status_code == 403
    api = bob.post("/api/jobs/journey/sign", json={"command": "decide"}, headers={"Origin": OTHER_ORIGIN, "x-csrftoken": csrf(bob)})
    assert api.status_code == 403 and api.json()["signedOut"] is True
    # no Origin at all: only a browser's own Sec-Fetch-Site: same-origin lets it through
    bare = s.client(headers={}, cookies=bob.cookies)
    assert bare.post("/jobs/journey/decision", data=fields, headers={"Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert bare.post("/jobs/journey/decision", data=fields, headers={"Sec-Fetch-Site": "same-site"}).status_code == 403
    assert bare.post("/jobs/journey/decision", data=fields).status_code == 403
    assert store_counts(ws.store, "decisions") == [0]

    # bob's own page: his origin, his session's token (which his sign-in kept): recorded once
    assert bare.post("/jobs/journey/decision", data=fields, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 303
    assert store_counts(ws.store, "decisions") == [1]
    assert ws.run("status").ok()["phase"] == "decided"


def test_a_sign_in_form_from_another_origin_or_another_session_signs_no_one_in(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    victim, mallory = s.client(), s.client()
    fields = {"csrftoken": csrf(mallory), "role": "carol", "password": password_of("carol"), "next": "/"}
    csrf(victim)  # the victim's browser has a session of its own
    assert victim.post("/login", data=fields).status_code == 403  # mallory's token, not the victim's session's
    assert victim.post("/login", data={**fields, "csrftoken": csrf(victim)}, headers={"Origin": OTHER_ORIGIN}).status_code == 403
    assert victim.get("/", headers={"Origin": s.base}).status_code == 303  # still not signed in
    assert victim.post("/login", data={**fields, "csrftoken": csrf(victim)}).status_code == 303


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith("VmRSS:")).split()[1])


def send_until_answered(base: str, head: bytes, chunks) -> bytes:
    """A raw HTTP/1.1 request: the head, then the body's chunks until serve answers (it need not read them all)."""
    where = urlsplit(base)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(head)
        for chunk in chunks:
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        sock.settimeout(30)
        answer = b""
        while b"\r\n" not in answer:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
        return answer


def test_a_body_over_a_mebibyte_or_trickled_in_is_refused_before_it_is_held(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    host = s.base.split("://", 1)[1]
    before = rss_kib(s.proc.pid)
    size = 40 * 1024 * 1024
    head = (
        f"POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: {s.base}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    answer = send_until_answered(s.base, head, (b"role=" + b"a" * (64 * 1024 - 5) for _ in range(size // (64 * 1024))))
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert rss_kib(s.proc.pid) - before < 20 * 1024

    # no length given (chunked): read and counted, and answered 413 once over, on a page's route as on the API's
    head = f"POST /jobs/journey/decision HTTP/1.1\r\nHost: {host}\r\nOrigin: {s.base}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    chunk = b"10000\r\n" + b"a" * 0x10000 + b"\r\n"
    answer = send_until_answered(s.base, head, (chunk for _ in range(40)))
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert rss_kib(s.proc.pid) - before < 20 * 1024
    # a body trickled in, a byte at a time: answered 408 once its time is up, the connection closed
    head = f"POST /login HTTP/1.1\r\nHost: {host}\r\nOrigin: {s.base}\r\nContent-Length: 1000\r\n\r\n".encode()
    started = time.monotonic()
    answer = send_until_answered(s.base, head, (time.sleep(0.5) or b"r" for _ in range(100)))
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert time.monotonic() - started < 30
    bob = sign_in(s, "bob")  # serve goes on
    assert post_form(bob, "/jobs/journey/decision", **decision_fields(bob)).status_code == 303
    assert store_counts(ws.store, "decisions") == [1]


def attacker_pages(target: str, digest: str, token: str) -> dict:
    """A page on another port of the same host. It tosses its own token cookie at serve's host, then, by its path:
    /form sends a form to serve's decision URL as soon as it loads; /quiet does the same from a page whose referrer
    policy is no-referrer (Chromium then sends `Origin: null`, as it does from serve's own pages); /fetch posts it with
    fetch(), credentials included (no-cors: the page cannot read the answer, only cause the request)."""
    form = f"""<form id="f" method="post" action="{target}">
<input name="decision" value="reject"><input name="reviewer" value="bob"><input name="reason" value="forged">
<input name="resultsSha256" value="{digest}"><input name="csrftoken" value="{token}"></form>"""
    send = {
        "/form": 'document.getElementById("f").submit();',
        "/quiet": 'document.getElementById("f").submit();',
        "/fetch": 'fetch(document.getElementById("f").action, {method: "POST", mode: "no-cors", credentials: "include",'
        ' body: new URLSearchParams(new FormData(document.getElementById("f")))})'
        '.then(() => { document.title = "sent"; }, () => { document.title = "sent"; });',
    }
    pages = {}
    for path, script in send.items():
        quiet = '<meta name="referrer" content="no-referrer">' if path == "/quiet" else ""
        pages[path] = f"""<!doctype html><html><head>{quiet}<title>attacker</title></head><body>{form}
<script>document.cookie = "csrftoken={token}; path=/"; {script}</script></body></html>"""
    return pages


def test_a_page_on_another_port_cannot_decide_in_bobs_browser(tmp_path, pg_server, serving, other_page, phone):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    base = s.base.replace("127.0.0.1", "localhost")
    mallory = httpx.Client(base_url=base, headers={"Origin": base})
    token = csrf(mallory)  # a token serve signed, from a session of mallory's
    driver = phone
    try:
        driver.get(f"{base}/login?next=/jobs/journey")
        driver.find_element("id", "role").send_keys("bob")
        driver.find_element("id", "password").send_keys(password_of("bob"))
        driver.find_element("css selector", "form[action='/login'] button[type=submit]").click()
        wait_for(lambda: driver.current_url == f"{base}/jobs/journey", timeout=20)  # not the login page, whose next= ends so too
        page = other_page(attacker_pages(f"{base}/jobs/journey/decision", shown_results(driver.page_source), token))
        for path in ("/form", "/quiet"):
            driver.get(page + path)
            wait_for(lambda: driver.current_url.startswith(base), timeout=20)
            wait_for(lambda: "another page" in driver.page_source or "no longer valid" in driver.page_source, timeout=20)
            assert "another page than serve" in driver.page_source, path
        driver.get(page + "/fetch")
        wait_for(lambda: driver.title == "sent", timeout=20)
        driver.get(f"{base}/jobs/journey")  # bob is still signed in, and the job still waits for his decision
        assert "Awaiting review" in driver.page_source
    finally:
        mallory.close()
    assert store_counts(ws.store, "decisions") == [0]
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_every_route_that_changes_something_refuses_a_post_from_another_port_of_the_same_host(tmp_path, serving):
    """Each POST route serve has (web.ROUTES, the newest included: settling an uncertain call, resuming a job), posted
    from a page on another port of serve's host with the person's own cookie and even their form token: refused, and
    the job's state directory unchanged, byte for byte."""
    from durable_job_team import web

    ws, key, browser = test_web.uncertain_under_root(tmp_path, serving)
    token = csrf(browser)
    before = ws.state_bytes()
    posts = [path.replace("{job_id:str}", "journey") for path, methods, *_ in web.ROUTES if "POST" in methods]
    assert {"/jobs/journey/reconcile", "/jobs/journey/resume", "/jobs/journey/decision"} <= set(posts)
    fields = {"csrftoken": token, "operationKey": key, "action": "abandon", "reviewer": "x", "reason": "forged"}
    for path in posts:
        answer = browser.post(path, data=fields, headers={"Origin": OTHER_ORIGIN, "X-CSRFToken": token})
        assert answer.status_code == 403, (path, answer.status_code)
    assert ws.state_bytes() == before
    assert post_form(browser, "/jobs/journey/reconcile", **{k: v for k, v in fields.items() if k != "csrftoken"}).status_code == 303
    assert ws.state_bytes() != before  # the same form from serve's own page is taken
