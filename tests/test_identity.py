"""Who did it, and who may (issue 21): the database authenticates every connection, records who acted, and decides
who may see and do what. The review that found the holes, replayed: alice owns the job and names bob as its reviewer;
carol is granted but not named; `worker` runs jobs. Every refusal is tried through the CLI and through SQL as that role.
"""

import json
import os
import subprocess

import psycopg
import pytest
from pg_server import pg_bin

from conftest import REPO, Workspace, admin_url, as_, as_role, clean_env, new_store, openai_workspace, refused, sql, store_rows
from durable_job_team import workers

# Every table of the store holding a job's rows (the migration tables and the roles list hold none).
JOB_TABLES = ("jobs", "job_locks", "calls", "call_events", "drafts", "outcomes", "decisions", "receipts")
THREAD_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def counts(url: str) -> dict:
    """How many rows of each job table the role sees."""
    return {t: sql(url, f"SELECT count(*) FROM durable_job.{t}")[0][0] for t in (*JOB_TABLES, *THREAD_TABLES)}


@pytest.fixture
def review(tmp_path, pg_server):
    """alice's job, waiting at review, naming bob as its reviewer (a fresh store as alice)."""
    ws = Workspace(tmp_path / "alice", store=new_store(pg_server, "alice"))
    ws.write_manifest(jobId="alice-merger", reviewers=["bob"])
    out = ws.start().ok()
    assert out["interrupt"], out
    return ws


def test_carol_sees_nothing_of_alices_job_through_the_cli_or_sql(review, tmp_path):
    carol = as_(review, "carol", tmp_path)
    assert carol.run("jobs", "--store", carol.store).ok()["jobs"] == []
    missing = carol.run("status", "--job", "no-such-job").held("StateError")
    hidden = carol.run("status", "--job", "alice-merger").held("StateError")
    assert hidden == missing.replace("no-such-job", "alice-merger")  # as for a job that does not exist
    carol.run("inspect", "--job", "alice-merger", "--html", str(tmp_path / "page.html")).held("No job 'alice-merger'")
    assert not os.path.exists(tmp_path / "page.html")
    for command in (["resume"], ["verify"], ["cancel", "--reviewer", "c", "--reason", "r"]):
        carol.run(*command, "--job", "alice-merger").held("No job 'alice-merger'")
    assert set(counts(carol.store).values()) == {0}  # checkpoint blobs included
    seen = counts(as_role(review.store, "bob"))
    assert seen["jobs"] == 1 and seen["calls"] == 2 and seen["checkpoint_blobs"] > 0
    assert counts(as_role(review.store, "worker")) == seen  # workers see every job: they run them
    # the advisory-lock keys of old were in pg_locks for anyone: the lock row is not even visible to carol
    assert sql(carol.store, "SELECT count(*) FROM durable_job.job_locks")[0][0] == 0


def test_bobs_decision_as_alice_owner_is_recorded_as_bob_and_verify_requires_its_row(review, tmp_path):
    bob, alice, worker = (as_(review, r, tmp_path) for r in ("bob", "alice", "worker"))
    alice.run("decide", "--decision", "accept", "--reviewer", "Alice Owner", "--reason", "mine").held(
        "Role alice may not decide job alice-merger", "its reviewers (bob) decide it, never its owner alice (four eyes)"
    )
    worker.run("decide", "--decision", "accept", "--reviewer", "Alice Owner", "--reason", "w").held("Role worker may not decide")
    row = ("alice-merger", "decision", "accept", "Alice Owner", "r", "{}", "2026-12-01T00:00:00Z", "alice")
    insert = "INSERT INTO durable_job.decisions (job_id, kind, decision, reviewer, reason, record_json, created_utc, principal) "
    for role in ("alice", "worker", "carol"):  # the database refuses the row itself, whatever the program does
        assert "row-level security" in refused(as_role(review.store, role), insert + "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", row)
    # what now? each is offered only what it may do: alice and the worker are told who decides, bob how
    for who in (alice, worker):  # who decides, and no decide command either would be refused
        told = who.run("status").ok()["next"]
        assert told == "waiting for the review: bob decides (its reviewers (bob) decide it, never its owner alice (four eyes))", told
    told = bob.run("status").ok()["next"]
    assert told.startswith("python ") and told.split()[2:4] == ["decide", "--store"], told
    out = bob.run("decide", "--decision", "hold", "--reviewer", "Alice Owner", "--reason", "needs a second look", "--text").stdout
    assert "hold by Alice Owner (role bob)" in out
    recorded = sql(admin_url(review.store), "SELECT principal, reviewer FROM durable_job.decisions")
    assert recorded == [("bob", "Alice Owner")]
    assert review.receipt()["principal"] == "bob" and review.receipt()["owner"] == "alice"
    assert review.receipt()["final"]["principal"] == "bob"
    report = alice.run("verify").ok()
    assert (
        report["ok"]
        and {"name": "decision", "ok": True, "detail": "hold by Alice Owner (role bob), as the journal's row records it"}
        in (report["checks"])
    )
    listed = alice.run("jobs", "--store", alice.store).ok()["jobs"]
    assert [(j["owner"], j["reviewers"], j["decidedBy"]) for j in listed] == [
        ("alice", ["bob"], {"principal": "bob", "reviewer": "Alice Owner"})
    ]
    # the administrator removes the journal's row: the thread's decision alone no longer verifies
    sql(admin_url(review.store), "DELETE FROM durable_job.decisions")
    check = {c["name"]: c for c in alice.run("verify").json["checks"]}["decision"]
    assert not check["ok"] and "a decision the journal does not" in check["detail"]


def test_no_role_but_the_administrator_deletes_or_rewrites_history(review, tmp_path):
    bob = as_(review, "bob", tmp_path)
    bob.run("decide", "--decision", "hold", "--reviewer", "Alice Owner", "--reason", "wait").ok()
    before = store_rows(admin_url(review.store))
    for role in ("alice", "bob", "worker"):
        url = as_role(review.store, role)
        for statement in (
            "DELETE FROM durable_job.receipts",
            "DELETE FROM durable_job.call_events",
            "DELETE FROM durable_job.decisions",
            "DELETE FROM durable_job.jobs",
            "DELETE FROM durable_job._migrations",
            "INSERT INTO durable_job._migrations VALUES ('m999_mine', 'now')",
            "UPDATE durable_job.decisions SET reviewer = 'someone else'",
            "UPDATE durable_job.receipts SET receipt_json = '{}'",
            "UPDATE durable_job.jobs SET owner = 'bob'",
            "UPDATE durable_job.jobs SET finished_at = NULL",  # the claim's mark: the database's own, set once
            "UPDATE durable_job.jobs SET finished_at = now()",
            "UPDATE durable_job.call_events SET principal = 'alice'",
            "UPDATE durable_job.calls SET output_text = 'made up'",
            "DELETE FROM durable_job.calls",
            "UPDATE durable_job.checkpoints SET metadata = '{}'",
            "DELETE FROM durable_job.checkpoint_blobs",
            "UPDATE durable_job.roles SET kind = 'worker'",
        ):
            message = refused(url, statement)
            assert "permission denied" in message or "is history" in message or "only a pending call changes" in message, message
    # a row a role adds names that role, whatever it says
    event = "INSERT INTO durable_job.call_events (job_id, operation_key, event, detail_json, at_utc, principal) VALUES (%s, 'k', 'note', '{}', 'x', 'alice')"
    assert "row-level security" in refused(as_role(review.store, "carol"), event, ("alice-merger",))
    # the job is finished (bob's hold wrote its receipt): its history takes nothing more, from bob either
    assert "is finished" in refused(as_role(review.store, "bob"), event, ("alice-merger",))
    assert store_rows(admin_url(review.store)) == before  # nothing above changed a row


def test_a_job_is_marked_finished_by_its_receipt_alone_so_a_claim_reads_only_unfinished_jobs(review, tmp_path):
    admin = admin_url(review.store)

    def mark():
        return sql(admin, "SELECT finished_at IS NOT NULL FROM durable_job.jobs WHERE job_id = 'alice-merger'")[0][0]

    assert mark() is False
    for role in ("alice", "bob", "worker"):  # no role marks a job that has not finished (nor unmarks one)
        assert "permission denied" in refused(as_role(review.store, role), "UPDATE durable_job.jobs SET finished_at = now()")
    assert mark() is False
    as_(review, "bob", tmp_path).run("decide", "--decision", "accept", "--reviewer", "Bob", "--reason", "ok").ok()
    assert mark() is True  # set in the receipt's own transaction, by the database

    plan = "\n".join(r[0] for r in sql(admin, "EXPLAIN " + workers.RUNNABLE_SQL))
    assert "jobs_unfinished" in plan or "finished_at IS NULL" in plan, plan  # the claim looks only at unfinished jobs
    assert sql(as_role(review.store, "worker"), workers.RUNNABLE_SQL) == []


def test_only_the_owner_and_reviewers_reconcile_revise_or_cancel_and_the_worker_only_runs(tmp_path, pg_server):
    alice = Workspace(tmp_path / "alice", store=new_store(pg_server, "alice"))
    alice.write_manifest(jobId="crashed", reviewers=["bob"])
    assert alice.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    worker, bob = as_(alice, "worker", tmp_path), as_(alice, "bob", tmp_path)
    key = alice.run("status").ok()["calls"][0][0]
    reconcile = ("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "Alice Owner", "--reason", "no usage")
    worker.run(*reconcile).held("Role worker may not reconcile job crashed", "its owner alice and its reviewers (bob) may")
    abandon = "UPDATE durable_job.calls SET status = 'abandoned', reconciliation_json = '{}' WHERE operation_key = %s"
    assert "owner or a reviewer reconciles" in refused(as_role(alice.store, "worker"), abandon, (key,))
    out = bob.run(*reconcile, "--text").stdout
    assert "abandoned: abandon by Alice Owner (role bob): no usage" in out
    assert sql(admin_url(alice.store), "SELECT principal FROM durable_job.call_events WHERE event = 'reconciled'") == [("bob",)]
    bob.run("resume").held("Role bob may not resume job crashed", "its owner alice and the store's workers run it")
    done = worker.run("work", "--store", worker.store, "--until-idle", state=False).ok()
    assert [r["to"] for r in done["runs"]] == ["awaiting-review"]
    dispatched = sql(
        admin_url(alice.store), "SELECT principal, detail_json FROM durable_job.call_events WHERE event = 'dispatch' ORDER BY id"
    )
    assert [p for p, _ in dispatched] == ["alice", "worker", "worker"]  # the crashed start's call, then the worker's two
    assert {json.loads(d)["endpoint"] for _, d in dispatched} == {"fake"}
    summary = os.path.join(worker.root, "summary.txt")
    with open(summary, "w") as fh:
        fh.write("A worker's own words.")
    worker.run("revise", "--item", "alpha", "--summary-file", summary, "--reviewer", "w", "--reason", "r").held(
        "Role worker may not revise"
    )
    worker.run("cancel", "--reviewer", "w", "--reason", "r").held("Role worker may not cancel")
    as_(alice, "carol", tmp_path).run("cancel", "--reviewer", "c", "--reason", "r").held("No job 'crashed'")
    assert alice.run("status").ok()["phase"] == "awaiting-review"


def test_a_taken_job_id_is_refused_to_every_other_role_even_with_the_same_bytes(tmp_path, pg_server):
    alice = Workspace(tmp_path / "alice", store=new_store(pg_server, "alice"))
    alice.write_manifest(jobId="q3", reviewers=["bob"])
    assert alice.run("submit", "--manifest", alice.manifest).ok()["existing"] is False
    for role in ("carol", "bob"):  # bob sees the job, and still may not seal it as his
        other = as_(alice, role, tmp_path)
        for command in ("submit", "start"):
            other.run(command, "--manifest", other.manifest).held("jobId q3 is taken in this store; give this request a new jobId")
    assert alice.run("submit", "--manifest", alice.manifest).ok()["existing"] is True  # the owner continues, as before
    assert sql(admin_url(alice.store), "SELECT job_id, owner FROM durable_job.jobs") == [("q3", "alice")]
    # a worker seals nothing, and no person's manifest may name its owner as a reviewer (four eyes)
    worker = as_(alice, "worker", tmp_path)
    worker.write_manifest(jobId="w1")
    worker.run("submit", "--manifest", worker.manifest).held("Role worker may not seal jobs")
    alice.write_manifest(jobId="q4", reviewers=["alice", "bob"])
    alice.run("submit", "--manifest", alice.manifest).held("Manifest reviewers names alice, the role sealing job q4")


def test_a_role_that_may_not_act_cannot_hold_a_job_busy_and_a_busy_refusal_names_the_holder(review, tmp_path):
    carol_url = as_role(review.store, "carol")
    with psycopg.connect(carol_url, autocommit=False) as conn:  # carol tries to take the lock row: she cannot even see it
        assert conn.execute("SELECT job_id FROM durable_job.job_locks FOR UPDATE NOWAIT").fetchall() == []
        assert as_(review, "bob", tmp_path).run("decide", "--decision", "hold", "--reviewer", "B", "--reason", "r").code == 0
    review.write_manifest(jobId="second")
    review.start().ok()
    with psycopg.connect(as_role(review.store, "alice"), autocommit=False) as conn:  # a writer of alice's holds `second`
        conn.execute("SET application_name = 'durable_job resume 4242 2026-12-01T10:00:00Z laptop'")
        conn.execute("SELECT 1 FROM durable_job.job_locks WHERE job_id = 'second' FOR UPDATE")
        line = review.run("resume", "--job", "second").held("Job second busy", "(resume by role alice on host laptop, pid 4242")
        assert "since 2026-12-01T10:00:00Z" in line
        assert review.run("status", "--job", "second").ok()["phase"] != "running"  # resume is not running: it is waiting here


def test_a_sealed_base_url_keeps_the_sources_from_any_other_endpoint(tmp_path, pg_server, provider):
    alice = openai_workspace(Workspace(tmp_path / "alice", store=new_store(pg_server, "alice")), provider)
    manifest = alice.manifest_dict(mode="openai", model="gpt-test", jobId="sealed-endpoint", baseUrl=provider.base_url)
    alice.write_manifest(manifest)
    assert alice.run("submit", "--manifest", alice.manifest).ok()["phase"] == "not-started"
    worker = as_(alice, "worker", tmp_path)
    elsewhere = provider.env(OPENAI_BASE_URL="http://127.0.0.1:9/v1", DURABLE_JOB_OPENAI_TIMEOUT="5")
    held = worker.run("work", "--store", worker.store, "--until-idle", state=False, env=elsewhere)
    assert held.code == 2 and "work held 1 job" in held.stderr  # issue 35: the hold is said, and recorded on the job
    done = held.json
    assert [r.get("hold", "") for r in done["runs"]] == [done["runs"][0]["hold"]] and "seals its provider" in done["runs"][0]["hold"]
    assert sql(admin_url(alice.store), "SELECT count(*) FROM durable_job.calls")[0][0] == 0 and provider.requests() == []
    alice.run("resume", env=elsewhere).held("seals its provider", "nothing was sent", f"OPENAI_BASE_URL={provider.base_url}")
    assert alice.run("release").ok()["released"]["by"] == "alice"  # her own resume's hold, lifted for the workers
    worker.run("work", "--store", worker.store, "--until-idle", state=False, env=provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5")).ok()
    endpoint = "http://127.0.0.1:" + provider.base_url.split(":")[2].split("/")[0] + "/v1"
    inspected = alice.run("inspect", "--html", str(tmp_path / "page.html")).ok()
    assert {c["endpoint"] for c in inspected["calls"]} == {endpoint}
    with open(tmp_path / "page.html", encoding="utf-8") as fh:
        assert endpoint in fh.read()
    alice.run("decide", "--decision", "hold", "--reviewer", "Alice Owner", "--reason", "r").ok()
    assert set(alice.receipt()["endpoints"].values()) == {endpoint}
    alice.write_manifest(alice.manifest_dict(mode="openai", model="m", jobId="x", baseUrl="https://user:pw@example.test/v1"))
    alice.start().held("ManifestError", "Manifest baseUrl must be")


def test_jobs_finds_your_work_by_owner_reviewer_phase_and_date(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    alice = Workspace(tmp_path / "a", store=store)
    bob = Workspace(tmp_path / "b", store=as_role(store, "bob"))
    alice.write_manifest(jobId="a-reviewed-by-bob", reviewers=["bob"])
    alice.start().ok()
    alice.write_manifest(jobId="a-alone")
    alice.start().ok()
    alice.run("decide", "--decision", "reject", "--reviewer", "Alice", "--reason", "no").ok()
    bob.write_manifest(jobId="b-reviewed-by-alice", reviewers=["alice"])
    bob.start().ok()
    bob.write_manifest(jobId="b-private")
    bob.start().ok()

    def ids(w: Workspace, *flags) -> list:
        return [j["jobId"] for j in w.run("jobs", "--store", w.store, *flags).ok()["jobs"]]

    assert ids(alice) == ["a-reviewed-by-bob", "a-alone", "b-reviewed-by-alice"]  # b-private is bob's alone
    assert ids(alice, "--mine") == ["a-reviewed-by-bob", "a-alone"]
    assert ids(alice, "--to-review") == ["b-reviewed-by-alice"]
    assert ids(bob, "--to-review") == ["a-reviewed-by-bob", "b-private"]
    assert ids(alice, "--owner", "bob") == ["b-reviewed-by-alice"]
    assert ids(alice, "--phase", "decided", "--phase", "cancelled") == ["a-alone"]
    assert ids(alice, "--since", "2999-01-01") == [] and len(ids(alice, "--since", "2000-01-01T00:00Z")) == 3
    alice.run("jobs", "--store", store, "--phase", "done").held("UsageError", "--phase 'done'", "awaiting-review")
    alice.run("jobs", "--store", store, "--since", "yesterday").held("UsageError", "--since 'yesterday'")
    text = alice.run("jobs", "--store", store, "--text").stdout
    assert "OWNER  REVIEWERS  DECIDED BY" in text and "Alice (alice)" in text
    # in state directories the owner is the operating-system account
    me = __import__("pwd").getpwuid(os.geteuid()).pw_name
    mine = Workspace(tmp_path / "dirs" / "one")
    mine.write_manifest(jobId="dir-job", reviewers=["someone-else"])
    mine.start().ok()
    rows = mine.run("jobs", "--root", str(tmp_path / "dirs")).ok()["jobs"]
    assert [(r["jobId"], r["owner"], r["reviewers"]) for r in rows] == [("dir-job", me, ["someone-else"])]
    assert mine.run("jobs", "--root", str(tmp_path / "dirs"), "--mine", "--to-review").ok()["jobs"] == []
    assert len(mine.run("jobs", "--root", str(tmp_path / "dirs"), "--owner", me, "--phase", "awaiting-review").ok()["jobs"]) == 1


def test_a_state_directory_records_the_account_that_acted(ws):
    me = __import__("pwd").getpwuid(os.geteuid()).pw_name
    ws.start().ok()
    out = ws.run("decide", "--decision", "hold", "--reviewer", "Dana Reviewer", "--reason", "later", "--text").stdout
    assert f"hold by Dana Reviewer (account {me})" in out
    assert {r["principal"] for r in ws.calls()} == {me} and ws.job()["owner"] == me
    assert ws.receipt()["principal"] == me and ws.run("verify").ok()["ok"]


def test_a_dump_restored_into_a_new_database_keeps_every_principal_and_verifies(review, tmp_path, pg_server):
    as_(review, "bob", tmp_path).run("decide", "--decision", "hold", "--reviewer", "Alice Owner", "--reason", "r").ok()
    dump = tmp_path / "store.sql"
    admin = admin_url(review.store)
    # as the README says: the administrator dumps with its own policies applied (FORCE RLS), as INSERTs
    subprocess.run(
        [pg_bin("pg_dump"), "--enable-row-security", "--inserts", "--no-owner", "-f", str(dump), "-d", admin],
        check=True,
        env=clean_env(),
        capture_output=True,
    )
    restored = new_store(pg_server, empty=True)
    subprocess.run(
        [pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(dump), "-d", restored],
        check=True,
        env=clean_env(),
        capture_output=True,
    )
    principals = "SELECT principal FROM durable_job.{} ORDER BY 1"
    for table in ("decisions", "calls", "receipts"):
        assert sql(restored, principals.format(table)) == sql(admin, principals.format(table)), table
    assert sql(restored, "SELECT owner, reviewers FROM durable_job.jobs") == [("alice", ["bob"])]
    again = Workspace(tmp_path / "restored", store=as_role(restored, "alice"))
    report = again.run("verify", "--job", "alice-merger").ok()
    assert report["ok"], report
    assert counts(as_role(restored, "carol"))["jobs"] == 0  # the policies came back with the rows


def test_migrate_brings_a_store_made_before_owners_under_the_policies(tmp_path, pg_server):
    old_program = tmp_path / "old_durable_job.py"
    old = subprocess.run(["git", "-C", REPO, "show", "2c1cad7:durable_job.py"], capture_output=True, check=True).stdout
    old_program.write_bytes(old)
    store = new_store(pg_server, empty=True)  # made by the program before this change, as its README said
    old_ws = Workspace(tmp_path / "old", store=as_role(store, "alice"))
    old_ws.write_manifest(jobId="before-owners")
    old_ws.run("migrate", "--store", store, "--grant", "alice", "--grant", "carol", program=str(old_program)).ok()
    assert old_ws.start(program=str(old_program)).code == 0
    carol_url = as_role(store, "carol")
    assert sql(carol_url, "SELECT count(*) FROM durable_job.jobs")[0][0] == 1  # before: every granted role saw it
    migrated = old_ws.run("migrate", "--store", store, "--grant", "alice", "--grant", "carol", "--owner", "alice").ok()
    assert migrated["adopted"] == 1 and migrated["changed"] is True
    assert sql(carol_url, "SELECT count(*) FROM durable_job.jobs")[0][0] == 0
    listed = old_ws.run("jobs", "--store", old_ws.store).ok()["jobs"]
    assert [(j["jobId"], j["owner"]) for j in listed] == [("before-owners", "alice")]
    assert "permission denied" in refused(old_ws.store, "DELETE FROM durable_job.receipts")
    carol = Workspace(tmp_path / "carol", store=carol_url)
    carol.run("migrate", "--store", carol_url, "--grant", "carol").held("administrator")
