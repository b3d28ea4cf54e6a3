"""The outbox against the roles that may write it (issue 43): forged notifications, poisoned rows, a redirecting
receiver, a replayed delivery and a secret file others may read.

Real PostgreSQL roles logging in with their passwords (psycopg), real `notify` and `notify --follow` processes, real
loopback webhook receivers (tests/receiver.py), a real command target, and the receiver's check exactly as
docs/CONTRACT.md prints it.
"""

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest
from receiver import Receiver

from conftest import PROGRAM, RUN_PROGRAM, Workspace, admin_url, as_role, clean_env, free_port, refused, sql, wait_for

SECRET = b"hook-secret-" + b"0utb0x" * 4
PHISH = "https://phish.example/login"


def notify_config(tmp_path, port: int, name: str = "notify.json") -> str:
    secret = tmp_path / "hook.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    path = tmp_path / name
    hook = {"url": f"http://127.0.0.1:{port}/hook", "secretFile": str(secret)}
    path.write_text(json.dumps({"webUrl": "https://review.example", "webhooks": [hook]}))
    return str(path)


def notify(store: str, config: str, *more) -> subprocess.CompletedProcess:
    """One `notify` pass as the store's worker role."""
    argv = [sys.executable, RUN_PROGRAM, PROGRAM, "notify", "--store", as_role(store, "worker"), "--notify", config, *more]
    return subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=120)


def rows(store: str) -> dict:
    """{id: (event, delivered?, set_aside, last_error)} of every notification, as the administrator reads them."""
    found = sql(admin_url(store), "SELECT id, event, delivered_utc, set_aside, last_error FROM durable_job.outbox")
    return {r[0]: (r[1], r[2] is not None, r[3], r[4]) for r in found}


def reviewed_job(tmp_path, store: str, job_id: str) -> Workspace:
    """Alice's job with bob as its reviewer, run to review by her own start (its awaiting-review notification)."""
    w = Workspace(tmp_path / job_id, store=store)
    w.write_manifest(jobId=job_id, reviewers=["bob"])
    w.start().ok()
    return w


def insert(url: str, job: str, nid: str, event: str, payload, **columns) -> None:
    names = ["job_id", "id", "event", "payload_json", "created_utc", *columns]
    values = [job, nid, event, payload if isinstance(payload, str) else json.dumps(payload), "0000-00-00T00:00:00.000000Z"]
    sql(url, f"INSERT INTO durable_job.outbox ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})", (*values, *columns.values()))


def test_forged_outbox_rows_from_each_role_are_refused_or_sent_only_with_what_the_store_stamped(tmp_path, store_url):
    """Alice (the owner), bob (the reviewer) and the worker each log in and write outbox rows of their own: a decision
    nobody recorded, a principal not theirs, a phishing link, an unknown event, a payload that is no object, another
    job's id are each refused by the database. The rows it lets in (an awaiting-review a role may re-announce, its
    payload naming another owner, reviewers, addressee, decision and time, its stamped columns and delivery chosen)
    reach the receiver with the store's facts only: the inserting role as principal, the server's time, the job's
    people, the config's link, no decision."""
    reviewed_job(tmp_path, store_url, "forged")
    [(review_id, _)] = rows(store_url).items()
    for role in ("alice", "bob", "worker"):
        url = as_role(store_url, role)
        lie = {"id": f"lie-{role}", "event": "decided", "jobId": "forged", "decision": "accept", "principal": role}
        assert "no decision" in refused(url, *insert_sql("forged", f"lie-{role}", "decided", lie))
        lie.update(event="awaiting-review", principal="bob" if role != "bob" else "alice")
        assert "not the one the program writes" in refused(url, *insert_sql("forged", f"lie-{role}", "awaiting-review", lie))
        lie.update(principal=role, link=PHISH)
        assert "not the one the program writes" in refused(url, *insert_sql("forged", f"lie-{role}", "awaiting-review", lie))
        assert "not an event" in refused(url, *insert_sql("forged", f"pay-{role}", "payout", {"id": f"pay-{role}", "event": "payout"}))
        assert "not the one" in refused(url, *insert_sql("forged", f"arr-{role}", "held", "[]"))
        assert "not the one" in refused(url, *insert_sql("forged", f"cut-{role}", "held", "{not json"))
        other = {"id": review_id, "event": "awaiting-review", "jobId": "another", "principal": role}
        assert "not the one" in refused(url, *insert_sql("forged", f"oth-{role}", "awaiting-review", other))
        assert "not one this role may act on" in refused(url, *insert_sql("nosuchjob", "x", "held", {}))
        assert "is not cancelled" in refused(
            url,
            *insert_sql(
                "forged", f"can-{role}", "cancelled", {"id": f"can-{role}", "event": "cancelled", "jobId": "forged", "principal": role}
            ),
        )
        # what the database lets in: the program's own shape, every other field a lie
        insert(
            url,
            "forged",
            f"again-{role}",
            "awaiting-review",
            {
                "id": f"again-{role}",
                "event": "awaiting-review",
                "jobId": "forged",
                "principal": role,
                "owner": "mallory",
                "reviewers": ["mallory"],
                "to": ["mallory"],
                "decision": "accept",
                "at": "2000-01-01T00:00:00.000000Z",
                "phase": "decided",
            },
            principal="alice",
            recorded_at="2000-01-01T00:00:00Z",
            delivered_utc=None,
            tries=0,
        )
    stamped = sql(
        admin_url(store_url), "SELECT id, principal, recorded_at > now() - interval '5 minutes' FROM durable_job.outbox ORDER BY id"
    )
    assert [(i, p, recent) for i, p, recent in stamped if i.startswith("again-")] == [
        ("again-alice", "alice", True),
        ("again-bob", "bob", True),
        ("again-worker", "worker", True),
    ]

    port = free_port()
    receiver = Receiver(port, SECRET).start()
    try:
        done = notify(store_url, notify_config(tmp_path, port))
    finally:
        receiver.stop()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["delivered"] == 4 and json.loads(done.stdout)["setAside"] == 0
    got = {g["id"]: g for g in receiver.got}
    assert set(got) == {review_id, "again-alice", "again-bob", "again-worker"}
    for role in ("alice", "bob", "worker"):
        event = got[f"again-{role}"]["json"]
        assert got[f"again-{role}"]["signed"]
        assert event["principal"] == role and event["owner"] == "alice" and event["reviewers"] == ["bob"] and event["to"] == ["bob"]
        assert event["phase"] == "awaiting-review" and "decision" not in event and not event["at"].startswith("2000")
        assert event["link"] == "https://review.example/jobs/forged"
    assert all(PHISH not in g["body"] and "mallory" not in g["body"] for g in receiver.got)


def insert_sql(job: str, nid: str, event: str, payload) -> tuple:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return (
        "INSERT INTO durable_job.outbox (job_id, id, event, payload_json, created_utc) VALUES (%s, %s, %s, %s, %s)",
        (job, nid, event, text, "0000-00-00T00:00:00.000000Z"),
    )


POISON = [
    ("held", "[]"),
    ("held", "{not json"),
    ("held", ""),
    ("held", "null"),
    ("held", '"a string"'),
    ("decided", "[1, 2]"),
    ("bogus", "{}"),
    ("awaiting-review\n", "{}"),
    ("held", '{"id": "elsewhere", "event": "held", "jobId": "poisoned"}'),
    ("held", "[" * 5000 + "]" * 5000),
]


def poisoned_rows(job_id: str) -> list:
    """Twenty rows no program of ours writes: arrays, cut JSON, unknown events, payloads naming other rows, a decision
    the job never recorded, a phase no job has, a call the job never made, each with created_utc zeros."""
    out = []
    for n in range(20):
        nid = f"poison-{n:02d}"
        event, payload = POISON[n % len(POISON)]
        if n >= len(POISON):
            event = ("decided", "held", "uncertain-call", "decided", "held")[n % 5]
            shape = {"id": nid, "event": event, "jobId": job_id, "decision": "accept", "phase": "hacked", "operationKey": "nope"}
            payload = json.dumps(shape)
        out.append((nid, event, payload))
    return out


def test_twenty_poisoned_store_rows_are_set_aside_counted_and_the_good_events_after_them_delivered(tmp_path, store_url):
    """Twenty rows the store's checks would refuse today (written by its administrator, or before m020_outbox_stamped)
    stamped before a job's real events: `notify --follow` sets each aside once, says so, and delivers the real ones;
    one `notify` pass after it counts them and delivers nothing twice; its output says how many are set aside."""
    w = reviewed_job(tmp_path, store_url, "poisoned")
    [(review_id, _)] = rows(store_url).items()
    sql(admin_url(store_url), "UPDATE durable_job.outbox SET recorded_at = now() + interval '1 second'")  # after the poison
    for nid, event, payload in poisoned_rows("poisoned"):
        insert(admin_url(store_url), "poisoned", nid, event, payload, recorded_at="2000-01-01T00:00:00Z")
    port = free_port()
    config = notify_config(tmp_path, port)
    receiver = Receiver(port, SECRET).start()
    argv = [sys.executable, PROGRAM, "notify", "--follow", "--store", as_role(store_url, "worker"), "--notify", config]
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        wait_for(lambda: review_id in receiver.ids(), timeout=12)  # the first pass (the poison once held it up a pass each)
        w.run("cancel", "--reviewer", "Alice", "--reason", "not needed").ok()  # a good event after the poison
        wait_for(lambda: any(e == "cancelled" and d for e, d, _, _ in rows(store_url).values()), timeout=30)
        time.sleep(2.5)  # two more passes: nothing is tried again
    finally:
        follower.send_signal(signal.SIGTERM)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
    assert json.loads(out)["setAside"] == 20 and json.loads(out)["delivered"] == 2
    assert err.count("set aside ") == 20 and "HOLD" not in err and "trying again" not in err
    assert [g["event"] for g in receiver.got] == ["awaiting-review", "cancelled"]
    assert all(g["signed"] for g in receiver.got)
    found = rows(store_url)
    assert sorted(i for i, (_, _, aside, _) in found.items() if aside) == [f"poison-{n:02d}" for n in range(20)]
    assert not any(delivered for i, (_, delivered, _, _) in found.items() if i.startswith("poison"))
    assert "job records no decision" in found["poison-10"][2] and "not JSON" in found["poison-01"][2]

    again = notify(store_url, config)
    receiver.stop()
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"delivered": 0, "failedTries": 0, "setAside": 0, "setAsideInAll": 20, "followed": False}
    assert len(receiver.got) == 2


def test_a_state_directorys_poisoned_outbox_is_set_aside_and_its_events_rebuilt_from_the_job(ws, tmp_path):
    """Twenty poisoned rows written into a state directory's effects.sqlite before its job's cancel, and one shaped as
    the program writes it but lying (another principal, addressee and decision, a phishing link): one `notify` pass
    sets the twenty aside and hands the command the cancel and the lie, each rebuilt from the job's own records."""
    got = tmp_path / "got.jsonl"
    script = tmp_path / "take.py"
    script.write_text(f"import sys\nopen({str(got)!r}, 'a').write(sys.stdin.read() + '\\n')\n")
    config = tmp_path / "notify.json"
    config.write_text(json.dumps({"webUrl": "https://me.example", "commands": [{"argv": [sys.executable, str(script)]}]}))
    ws.start().ok()
    db = sqlite3.connect(os.path.join(ws.state, "effects.sqlite"))
    with db:
        db.execute("UPDATE outbox SET delivered_utc = created_utc")  # the review was told
        for nid, event, payload in poisoned_rows("journey"):
            db.execute("INSERT INTO outbox (id, event, payload_json, created_utc) VALUES (?, ?, ?, '0000')", (nid, event, payload))
        lie = {"id": "lie", "event": "awaiting-review", "jobId": "journey", "principal": "mallory", "to": ["mallory"]}
        lie.update(decision="accept", link=PHISH, owner="mallory")
        db.execute(
            "INSERT INTO outbox (id, event, payload_json, created_utc) VALUES ('lie', 'awaiting-review', ?, '0000')", (json.dumps(lie),)
        )
    db.close()
    ws.run("cancel", "--reviewer", "me", "--reason", "not needed").ok()
    done = ws.run("notify", "--notify", str(config), "--state-dir", ws.state, state=False).ok()
    assert (done["delivered"], done["setAside"], done["setAsideInAll"]) == (2, 20, 20)
    events = {e["id"]: e for e in (json.loads(line) for line in got.read_text().splitlines() if line)}
    cancelled = next(e for e in events.values() if e["event"] == "cancelled")
    assert set(events) == {"lie", cancelled["id"]}
    me = ws.principal()
    assert events["lie"]["principal"] == me and events["lie"]["owner"] == me and events["lie"]["to"] == [me]
    assert "decision" not in events["lie"] and events["lie"]["link"] == "https://me.example/jobs/journey"
    assert PHISH not in got.read_text() and "mallory" not in got.read_text()
    aside = ws.journal("SELECT id, set_aside FROM outbox WHERE set_aside IS NOT NULL ORDER BY id")
    assert [r["id"] for r in aside] == [f"poison-{n:02d}" for n in range(20)]


@pytest.mark.parametrize("status", [302, 303])
def test_a_webhook_that_redirects_is_not_followed_and_its_event_stays_undelivered(tmp_path, store_url, status):
    """The webhook answers with a redirect to another receiver: the sender does not follow it (the signature goes
    nowhere else, the second receiver gets nothing), and the event is a failed try, not delivered."""
    reviewed_job(tmp_path, store_url, f"moved{status}")
    [(review_id, _)] = rows(store_url).items()
    port, elsewhere = free_port(), free_port()
    there = Receiver(elsewhere, SECRET).start()
    here = Receiver(port, SECRET)
    here.redirect = (status, f"http://127.0.0.1:{elsewhere}/stolen")
    here.start()
    try:
        done = notify(store_url, notify_config(tmp_path, port))
    finally:
        here.stop()
        there.stop()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["delivered"] == 0 and json.loads(done.stdout)["failedTries"] == 1
    assert here.ids() == [review_id] and there.got == []
    event, delivered, _, error = rows(store_url)[review_id]
    assert not delivered and f"HTTP {status}" in error and "not followed" in error


def documented_check():
    """The receiver's check exactly as docs/CONTRACT.md prints it."""
    with open(os.path.join(os.path.dirname(PROGRAM), "docs", "CONTRACT.md"), encoding="utf-8") as fh:
        blocks = re.findall(r"```python\n(.*?)```", fh.read(), re.S)
    [code] = [b for b in blocks if b.startswith("# a receiver's check of X-Durable-Job-Signature")]
    space: dict = {}
    exec(code, space)
    return space["verified"]


def test_a_delivery_replayed_later_is_refused_by_the_documented_check(tmp_path, store_url):
    """A captured delivery (its body and its signature header, as sent) passes the contract's check when it arrives;
    replayed six minutes later it is refused, and so is the same signature under a fresh timestamp, or another body."""
    verified = documented_check()
    reviewed_job(tmp_path, store_url, "replayed")
    port = free_port()
    receiver = Receiver(port, SECRET).start()
    try:
        assert notify(store_url, notify_config(tmp_path, port)).returncode == 0
    finally:
        receiver.stop()
    [got] = receiver.got
    header, body = got["signature"], got["body"].encode("utf-8")
    t = int(re.fullmatch(r"t=(\d+),v1=[0-9a-f]{64}", header).group(1))
    assert abs(time.time() - t) < 60
    assert verified(header, body, SECRET) and verified(header, body, SECRET, now=t + 299)
    assert not verified(header, body, SECRET, now=t + 360)  # a replay, six minutes on
    assert not verified(header.replace(f"t={t}", f"t={t + 360}"), body, SECRET, now=t + 360)  # its time rewritten
    assert not verified(header, body.replace(b"replayed", b"replayeD"), SECRET)
    assert not verified(header, body, b"another secret")


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o666, 0o604, 0o600, 0o400])
def test_a_secret_file_its_group_or_others_may_open_is_refused_with_the_chmod_that_fixes_it(tmp_path, mode):
    config = notify_config(tmp_path, free_port())
    secret = tmp_path / "hook.secret"
    secret.chmod(mode)
    folder = tmp_path / f"dir-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    argv = [sys.executable, RUN_PROGRAM, PROGRAM, "notify", "--notify", config, "--state-dir", str(folder)]
    done = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), timeout=60)
    if mode & 0o077:
        assert done.returncode == 2 and done.stdout == ""
        [line] = done.stderr.splitlines()
        assert line.startswith("HOLD: UsageError: ") and f"mode {mode:04o}" in line and f"chmod 600 {secret}" in line
    else:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["delivered"] == 0
