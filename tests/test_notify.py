"""A job that needs a person says so (issue 35): notifications through an outbox, delivered at least once.

Real PostgreSQL with password roles, real `work` and `notify --follow` processes (one killed by a real SIGKILL while a
delivery is in flight), a real loopback webhook receiver (tests/receiver.py) that is down for part of the run, and a
real command target.
"""

import json
import signal
import subprocess
import sys
import time

import test_web
from receiver import Receiver

from conftest import ALPHA, BETA, PROGRAM, Workspace, admin_url, as_role, clean_env, free_port, refused, sql, wait_for

SECRET = b"hook-secret-" + b"s3cr3t" * 4
serving = test_web.serving  # the fixture that starts serves and stops them after each test


def notify_config(tmp_path, port: int) -> str:
    secret = tmp_path / "hook.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    path = tmp_path / "notify.json"
    hook = {"url": f"http://127.0.0.1:{port}/hook", "secretFile": str(secret)}
    path.write_text(json.dumps({"webUrl": "https://review.example", "webhooks": [hook]}))
    return str(path)


def outbox(store: str) -> dict:
    """{id: (event, delivered?)} of every notification in the store, as its administrator reads them."""
    return {r[0]: (r[1], r[2] is not None) for r in sql(admin_url(store), "SELECT id, event, delivered_utc FROM durable_job.outbox")}


def cli(store: str, role: str, *args, env=None) -> subprocess.CompletedProcess:
    argv = [sys.executable, PROGRAM, *args, "--store", as_role(store, role)]
    return subprocess.run(argv, capture_output=True, text=True, env={**clean_env(), **(env or {})}, timeout=120)


def follower(store: str, config: str) -> subprocess.Popen:
    """`notify --follow` as the store's worker role, until killed."""
    argv = [sys.executable, PROGRAM, "notify", "--follow", "--store", as_role(store, "worker"), "--notify", config]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())


def test_a_webhook_gets_every_event_of_a_job_run_by_a_worker_at_least_once_through_downtime_and_a_kill(tmp_path, store_url):
    """A worker runs the job to review while the receiver is down; `notify --follow` retries until it is up; the
    sender is SIGKILLed while delivering the decision (after the receiver took it, before it was marked), and the next
    sender delivers it again: each event's id arrives, none is missing, a repeat is the same id; every POST is signed;
    no payload holds a source's text, a model's output or the secret."""
    port = free_port()
    config = notify_config(tmp_path, port)
    w = Workspace(tmp_path / "alice", store=store_url)
    w.write_manifest(jobId="notified", reviewers=["bob"])
    w.run("submit", "--manifest", w.manifest).ok()
    assert outbox(store_url) == {}

    ran = cli(store_url, "worker", "work", "--until-idle", env={"DURABLE_JOB_NOTIFY": config})
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["counts"] == {"awaiting-review": 1} and "not delivered awaiting-review" in ran.stderr
    [(review_id, (event, delivered))] = outbox(store_url).items()
    assert event == "awaiting-review" and not delivered  # committed with the job's act; its receiver is down

    receiver = Receiver(port, SECRET)
    sender = follower(store_url, config)
    try:
        time.sleep(3)  # the follower tries and fails meanwhile: still down
        assert receiver.ids() == []
        receiver.start()
        wait_for(lambda: review_id in receiver.ids(), timeout=45)  # at most 30 s between two tries
        wait_for(lambda: outbox(store_url)[review_id][1], timeout=10)

        receiver.delay = 30.0  # the next delivery is recorded, then answered slowly: the sender is killed meanwhile (a loaded machine too)
        digest = w.run("inspect", "--job", "notified").ok()["resultsSha256"]
        decided = cli(
            store_url,
            "bob",
            "decide",
            "--job",
            "notified",
            "--decision",
            "accept",
            "--reviewer",
            "Bob",
            "--reason",
            "fine",
            "--results-sha256",
            digest,
        )
        assert decided.returncode == 0, decided.stderr
        decision_id = next(i for i, (e, _) in outbox(store_url).items() if e == "decided")
        wait_for(lambda: decision_id in receiver.ids(), timeout=15)
        sender.send_signal(signal.SIGKILL)
        sender.wait(timeout=10)
        assert outbox(store_url)[decision_id] == ("decided", False)  # delivered, but never marked: the kill came first
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
    receiver.delay = 0.0
    again = follower(store_url, config)
    try:
        wait_for(lambda: outbox(store_url)[decision_id][1], timeout=40)  # its lease runs out, and it goes again
    finally:
        again.send_signal(signal.SIGTERM)
        out, err = again.communicate(timeout=20)
        receiver.stop()
    assert again.returncode == 0, err
    ids = receiver.ids()
    assert set(ids) == set(outbox(store_url)) == {review_id, decision_id} and ids.count(decision_id) == 2  # none missing
    assert all(v[1] for v in outbox(store_url).values())
    for got in receiver.got:
        event = got["json"]
        assert got["signed"] and event["id"] == got["id"] and event["event"] == got["event"]
        assert event["jobId"] == "notified" and event["link"] == "https://review.example/jobs/notified"
        assert event["owner"] == "alice" and event["reviewers"] == ["bob"]
        for secret_or_text in (SECRET.decode(), ALPHA.strip()[:40], BETA.strip()[:40], "summary", "citations"):
            assert secret_or_text not in got["body"]
    review = next(g["json"] for g in receiver.got if g["id"] == review_id)
    assert review["phase"] == "awaiting-review" and review["to"] == ["bob"] and review["principal"] == "worker"
    decision = next(g["json"] for g in receiver.got if g["id"] == decision_id)
    assert decision["phase"] == "decided" and decision["decision"] == "accept" and decision["principal"] == "bob"


def test_a_state_directorys_notifications_go_to_a_command_on_its_standard_input_once_each(ws, tmp_path):
    """A state directory's job: its review, its hold and its cancel each add one notification in the act's own commit;
    `notify --state-dir` hands each to a command once (a second run sends nothing again); the events a target did not
    ask for are not sent to it."""
    got = tmp_path / "got.jsonl"
    script = tmp_path / "take.py"
    script.write_text(f"import sys\nopen({str(got)!r}, 'a').write(sys.stdin.read() + '\\n')\n")
    config = tmp_path / "notify.json"
    config.write_text(json.dumps({"commands": [{"argv": [sys.executable, str(script)], "events": ["awaiting-review", "cancelled"]}]}))

    ws.start().ok()
    delivered = ws.run("notify", "--notify", str(config), "--state-dir", ws.state, state=False).ok()
    assert delivered["delivered"] == 1
    assert ws.run("notify", "--notify", str(config), "--state-dir", ws.state, state=False).ok()["delivered"] == 0
    ws.run("cancel", "--reviewer", "me", "--reason", "not needed").ok()
    assert ws.run("notify", "--notify", str(config), "--state-dir", ws.state, state=False).ok()["delivered"] == 1
    events = [json.loads(line) for line in got.read_text().splitlines() if line]
    assert [e["event"] for e in events] == ["awaiting-review", "cancelled"]
    assert events[0]["phase"] == "awaiting-review" and events[1]["phase"] == "cancelled" and "link" not in events[0]
    rows = ws.journal("SELECT event, delivered_utc, tries FROM outbox ORDER BY created_utc")
    assert [(r["event"], r["delivered_utc"] is not None, r["tries"]) for r in rows] == [
        ("awaiting-review", True, 1),
        ("cancelled", True, 1),
    ]


def test_a_state_directorys_hold_is_notified_in_the_holds_own_commit(ws, tmp_path):
    port = free_port()
    ws.write_manifest(mode="openai", model="gpt-test", maxAttemptsPerItem=1, maxModelCalls=2)
    ws.env.update(
        {"OPENAI_API_KEY": "sk-test-" + "k3y" * 6, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1", "DURABLE_JOB_OPENAI_TIMEOUT": "5"}
    )
    ws.start().held("ProviderError")
    [row] = ws.journal("SELECT event, payload_json FROM outbox")
    held = json.loads(row["payload_json"])
    assert row["event"] == "held" and held["phase"] == "ready" and held["principal"] == ws.principal() and held["jobId"] == "journey"
    assert "message" not in held  # ids, phase and names: the hold's own words stay on the job (status shows them)


def test_the_outbox_shows_each_role_only_its_jobs_and_lets_a_sender_change_only_delivery(tmp_path, store_url):
    """Through psycopg as each role: a notification is seen only by who sees its job; a worker (a sender) changes only
    its delivery fields; a person cannot mark one delivered; nobody but the administrator removes one."""
    w = Workspace(tmp_path, store=store_url)
    w.write_manifest(jobId="seen")
    w.start().ok()  # alice's own run: its review notification
    [(nid, _)] = outbox(store_url).items()
    assert sql(as_role(store_url, "carol"), "SELECT count(*) FROM durable_job.outbox") == [(0,)]
    assert sql(as_role(store_url, "alice"), "SELECT principal FROM durable_job.outbox") == [("alice",)]
    assert "permission denied" in refused(as_role(store_url, "mallory"), "SELECT * FROM durable_job.outbox")
    assert sql(as_role(store_url, "alice"), "UPDATE durable_job.outbox SET delivered_utc = 'x' RETURNING id") == []  # not a sender
    forged = "INSERT INTO durable_job.outbox (job_id, id, event, payload_json, created_utc) VALUES ('seen', 'forged', 'decided', '{}', 'x')"
    assert "not one this role may act on" in refused(as_role(store_url, "carol"), forged)  # m020_outbox_stamped, before the policy
    assert "written once" in refused(as_role(store_url, "worker"), "UPDATE durable_job.outbox SET payload_json = '{}'")
    assert "permission denied" in refused(as_role(store_url, "worker"), "DELETE FROM durable_job.outbox")
    sql(as_role(store_url, "worker"), "UPDATE durable_job.outbox SET tries = 1, last_error = 'down' WHERE id = %s", (nid,))
    assert sql(admin_url(store_url), "SELECT tries, last_error FROM durable_job.outbox") == [(1, "down")]
    assert refused(as_role(store_url, "alice"), "SET ROLE worker; UPDATE durable_job.outbox SET delivered_utc = 'x'")


def test_notify_is_the_administrators_or_a_workers_and_names_its_config(tmp_path, store_url):
    config = notify_config(tmp_path, free_port())
    person = cli(store_url, "alice", "notify", "--notify", config)
    assert person.returncode == 2 and "may not deliver" in person.stderr and "--grant-worker" in person.stderr
    bare = cli(store_url, "worker", "notify")
    assert bare.returncode == 2 and "DURABLE_JOB_NOTIFY" in bare.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"webhooks": [{"url": "ftp://x"}]}))
    wrong = cli(store_url, "worker", "notify", "--notify", str(bad))
    assert wrong.returncode == 2 and "has a webhook that is not" in wrong.stderr
    assert json.loads(cli(store_url, "worker", "notify", "--notify", config).stdout) == {
        "delivered": 0,
        "failedTries": 0,
        "setAside": 0,
        "setAsideInAll": 0,
        "followed": False,
    }


def test_serve_with_a_notification_config_delivers_the_folders_notifications_while_it_serves(ws, tmp_path, serving):
    """`serve --root` named a config (DURABLE_JOB_NOTIFY): a job started meanwhile in a folder it serves is told to
    the command target within seconds, by the serve process itself."""
    got = tmp_path / "got.jsonl"
    script = tmp_path / "take.py"
    script.write_text(f"import sys\nopen({str(got)!r}, 'a').write(sys.stdin.read() + '\\n')\n")
    config = tmp_path / "notify.json"
    config.write_text(json.dumps({"webUrl": "https://me.example", "commands": [{"argv": [sys.executable, str(script)]}]}))
    serving(tmp_path, "--root", str(tmp_path), env={"DURABLE_JOB_NOTIFY": str(config)})
    ws.start().ok()
    wait_for(lambda: got.exists() and got.read_text().strip(), timeout=30)
    [event] = [json.loads(line) for line in got.read_text().splitlines() if line]
    assert event["event"] == "awaiting-review" and event["link"] == "https://me.example/jobs/journey"
