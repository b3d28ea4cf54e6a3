"""`serve` among hostile roles: a password guesser, a page kept busy by the store, a NOTIFY flood.

Real `serve` processes over real HTTP on loopback, against the session's PostgreSQL, whose roles log in with
their own passwords (tests/test_web.py's helpers start them and sign people in).
"""

import re
import threading
import time
import uuid

import httpx
import psycopg
import test_web
from pg_server import scram_verifier
from test_web import bob_revises, csrf, sign_in, store_job

from conftest import Workspace, as_role, password_of, wait_for

serving = test_web.serving  # the fixture that starts serves and stops them after each test


def refused_by_store(pg_server, role: str) -> int:
    """How many sign-ins as role the store itself has refused (its log's FATAL lines): the guesses it checked."""
    with open(pg_server.log, errors="replace") as fh:
        return fh.read().count(f'FATAL:  password authentication failed for user "{role}"')


def alike(r: httpx.Response, role: str) -> str:
    """A sign-in answer with what differs by request alone taken out: the nonce, the role typed, when to come back."""
    text = re.sub(r'nonce[=-]"?[A-Za-z0-9_-]+', "", r.text).replace(role, "ROLE")
    return re.sub(r"try again in \d+ s \(at [0-9:]+ UTC\)", "try again in N", text)


def test_password_guessing_is_throttled_alike_for_any_role_and_the_right_password_works_again(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store)
    nobody = f"nobody_{uuid.uuid4().hex[:8]}"
    earlier = refused_by_store(pg_server, "bob")  # other journeys on this server may have refused bob before
    c = s.client()
    token = csrf(c)

    def guess(role: str, password: str = "not-it", api: bool = False) -> tuple:
        began = time.monotonic()
        if api:
            r = c.post("/login", json={"role": role, "password": password}, headers={"x-csrftoken": token})
        else:
            r = c.post("/login", data={"csrftoken": token, "role": role, "password": password, "next": "/"})
        return r, time.monotonic() - began

    # a wrong password and an unknown role: the same answer, each checked by the store
    wrong, unknown = guess("bob")[0], guess(nobody)[0]
    assert wrong.status_code == unknown.status_code == 401 and "did not accept that role and password" in wrong.text
    assert alike(wrong, "bob") == alike(unknown, nobody) and 'value="bob"' in wrong.text  # the role stays filled in
    wrong, unknown = guess("bob", api=True)[0], guess(nobody, api=True)[0]
    assert wrong.status_code == unknown.status_code == 401 and wrong.json() == unknown.json()
    wait_for(lambda: (refused_by_store(pg_server, "bob"), refused_by_store(pg_server, nobody)) == (earlier + 2, 2), timeout=30)

    # twelve guessers at once for each: a few are checked, the rest refused at once without asking the store
    start = threading.Barrier(24)
    answers: list = []

    def guesser(role):
        start.wait()
        answers.append((role, *guess(role)))

    threads = [threading.Thread(target=guesser, args=(role,)) for role in ("bob", nobody) * 12]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    checked = [a for a in answers if a[1].status_code == 401]
    throttled = [a for a in answers if a[1].status_code == 429]
    assert len(checked) + len(throttled) == 24 and len(checked) <= 6, [a[1].status_code for a in answers]
    for role, r, seconds in throttled:
        assert 1 <= int(r.headers["retry-after"]) <= 60 and seconds < 1.5, (r.headers, seconds)
        assert f'value="{role}"' in r.text and "try again in" in r.text and "<style nonce=" in r.text
    assert {alike(r, role) for role, r, _ in throttled} == {alike(throttled[0][1], throttled[0][0])}  # any role alike
    assert "Too many sign-in attempts" in throttled[0][1].text
    # through the API too: on a loaded machine the wait after the burst may be over, but then the guess it lets through
    # starts a longer one, and the very next guess is refused
    api, _ = guess("bob", api=True)
    if api.status_code == 401:
        checked.append(("bob", api, 0.0))
        api, _ = guess("bob", api=True)
    assert api.status_code == 429 and api.json()["retryAfterSeconds"] == int(api.headers["retry-after"])
    wait_for(lambda: refused_by_store(pg_server, "bob") + refused_by_store(pg_server, nobody) == earlier + 4 + len(checked), timeout=30)
    assert "try again in" in api.json()["error"]

    # the guessing stops: bob's own password signs him in within a minute, once the wait it was told is over
    stopped = time.monotonic()
    while True:
        r, _ = guess("bob", password_of("bob"))
        if r.status_code == 303:
            break
        assert r.status_code == 429 and time.monotonic() - stopped < 60, r.text
        time.sleep(int(r.headers["retry-after"]))
    assert time.monotonic() - stopped < 60
    assert c.get("/api/jobs").json()["jobs"][0]["jobId"] == "journey"
    assert refused_by_store(pg_server, "bob") + refused_by_store(pg_server, nobody) == earlier + 4 + len(checked)  # nothing more checked


def test_a_page_kept_busy_by_the_store_keeps_no_one_signed_in(tmp_path, pg_server, serving):
    """Only a person's own requests are a use: the page's refreshes after each change, and its event stream, are not."""
    ws = store_job(tmp_path, pg_server)
    s = serving(tmp_path, "--store", ws.store, "--idle-minutes", "0.5")
    bob = sign_in(s, "bob")
    page = bob.get("/")
    assert page.status_code == 200 and "'X-Durable-Job-Refresh': '1'" in page.text  # the page's script marks its refreshes
    digest = bob.get("/api/jobs/journey").json()["resultsSha256"]
    last_own = time.monotonic()  # bob's last request of his own
    stop = threading.Event()

    def submit_jobs():  # alice submits a job for bob every few seconds: each changes bob's list
        for n in range(20):
            if stop.wait(2.5):
                return
            w = Workspace(tmp_path / f"more{n}", store=ws.store)
            w.write_manifest(jobId=f"more-{n}", reviewers=["bob"])
            w.run("submit", "--manifest", w.manifest, "--store", ws.store, state=False)

    changes = threading.Thread(target=submit_jobs, daemon=True)
    changes.start()
    refreshed: list = []  # when the page refreshed itself, and what it got
    signed_out = None
    try:
        with bob.stream("GET", "/api/events", timeout=60) as stream:  # the list page's own event stream
            event = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                if event == "signed-out":
                    signed_out = time.monotonic()
                    break
                if line.startswith("data: ") and event is None:  # a change: the page refreshes itself, as its script does
                    r = bob.get("/", headers={"X-Durable-Job-Refresh": "1"})
                    refreshed.append((time.monotonic() - last_own, r.status_code, r.text.count("/jobs/more-")))
                if not line:
                    event = None
                assert time.monotonic() - last_own < 45, refreshed  # still signed in long after its idle limit
    finally:
        stop.set()
    assert signed_out is not None and 29 <= signed_out - last_own < 40, refreshed
    shown = [(at, code, jobs) for at, code, jobs in refreshed if code == 200]
    assert len(shown) >= 4 and shown[-1][0] > 20 and shown[-1][2] > shown[0][2], refreshed  # changes kept coming, shown
    assert bob.get("/").status_code == 303  # signed out: back to the sign-in form
    r = bob.post(
        "/jobs/journey/decision",
        data={"csrftoken": csrf(bob), "decision": "hold", "reviewer": "Bob", "reason": "late", "resultsSha256": digest},
    )
    assert r.status_code == 401 and "Your session has ended" in r.text and "late" in r.text  # kept, for a sign-in
    assert ws.run("status").ok()["phase"] == "awaiting-review"  # nothing recorded


def rereads(url: str, role: str) -> int:
    """How many statements role has run in the store's database (pg_stat_statements), the watcher's lock poll and
    LISTEN aside: a page's re-read runs the same few each time."""
    with psycopg.connect(as_role(url, "postgres"), autocommit=True) as conn:
        return int(
            conn.execute(
                "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                "JOIN pg_roles r ON r.oid = s.userid WHERE d.datname = current_database() AND r.rolname = %s "
                "AND s.query NOT LIKE '%%pg_stat_activity%%' AND s.query NOT LIKE 'LISTEN%%'",
                (role,),
            ).fetchone()[0]
        )


def test_a_notify_flood_from_any_role_rereads_each_persons_pages_at_most_three_times_a_second(tmp_path, pg_server, serving):
    ws = store_job(tmp_path, pg_server)
    name = ws.store.rsplit("/", 1)[1]
    pg_server.sql("postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements", db=name)
    mallory, password = f"mallory_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    pg_server.sql("postgres", f"CREATE ROLE {mallory} LOGIN PASSWORD '{scram_verifier(password)}'", db="postgres")  # no grant
    s = serving(tmp_path, "--store", ws.store)
    bob = sign_in(s, "bob")
    seen: dict = {"/api/jobs/journey/events": [], "/api/events": []}
    done = threading.Event()

    def follow(path):  # one of bob's open pages
        try:
            with bob.stream("GET", path, timeout=60) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        seen[path].append(line)
                    if done.is_set():
                        return
        except httpx.HTTPError:
            pass

    for path in [*seen, "/api/jobs/journey/events"]:
        threading.Thread(target=follow, args=(path,), daemon=True).start()
    wait_for(lambda: all(seen.values()), timeout=20)
    with psycopg.connect(as_role(ws.store, mallory), password=password, autocommit=True) as flood:
        time.sleep(1.5)
        before = rereads(ws.store, "bob")
        flood.execute("NOTIFY durable_job")  # one notification: one re-read of each page bob has open
        time.sleep(1.5)
        one = rereads(ws.store, "bob") - before
        assert one > 0
        began, sent = time.monotonic(), 0
        while time.monotonic() - began < 3:
            flood.execute("NOTIFY durable_job")
            sent += 1
        time.sleep(0.5)
        seconds = time.monotonic() - began
        flooded = rereads(ws.store, "bob") - before - one
    assert sent > 1000
    assert flooded <= one * (3 * seconds + 2), (one, flooded, sent)  # at most three re-reads a second, not one a notification
    shown = seen["/api/jobs/journey/events"][-1]
    revised = bob_revises(ws, tmp_path, "Alpha, after the flood.")  # a real change is still shown
    assert revised["resultsSha256"] not in shown
    wait_for(lambda: revised["resultsSha256"] in seen["/api/jobs/journey/events"][-1], timeout=10)
    done.set()
