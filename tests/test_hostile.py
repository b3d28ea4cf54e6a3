"""Hostile roles (issue 30): the store holds against a role that knows PostgreSQL.

Each test plays a role of a team's store — carol (granted, named on no job), the worker, alice (the owner), bob
(the reviewer), mallory (a login with no grant on the store) — with the tricks a PostgreSQL attacker knows:
temporary tables, views and functions shadowing the catalog and the program's names, search_path and role
switching, direct writes to every table, every function called directly, the migration's lock, LISTEN/NOTIFY,
COPY and the statistics and error-message side channels. Each asserts that no row leaks, nothing changes (or only
what the rules allow), and `verify` still tells the truth.
"""

import json
import threading
import time

import psycopg
import pytest

from conftest import Workspace, admin_url, as_, as_role, new_store, refused, sql, store_rows
from durable_job_team import store as team_store

PEOPLE_AND_WORKER = ("carol", "worker", "alice", "bob")


def store_tables(url: str) -> list:
    """Every table of the store's schema, as the catalog lists them (a table added later is attacked too)."""
    return [
        r[0] for r in sql(admin_url(url), "SELECT relname FROM pg_class WHERE relnamespace = 'durable_job'::regnamespace AND relkind = 'r'")
    ]


@pytest.fixture
def team(tmp_path, pg_server):
    """alice's two jobs in one store, both naming bob as reviewer: `decided` accepted by bob (its receipt written),
    `waiting` at review."""
    store = new_store(pg_server, "alice")
    alice = Workspace(tmp_path / "alice", store=store)
    alice.write_manifest(jobId="decided", reviewers=["bob"])
    assert alice.start().ok()["interrupt"]
    bob = as_(alice, "bob", tmp_path)
    bob.run("decide", "--job", "decided", "--decision", "accept", "--reviewer", "Bob Reviewer", "--reason", "read it").ok()
    alice.write_manifest(jobId="waiting", reviewers=["bob"])
    assert alice.start().ok()["interrupt"]
    return alice


def shadow_everything(conn) -> None:
    """Temporary tables, a view and functions named as the catalog and the store's tables, each claiming the session is
    the schema's owner, a superuser, a worker and every job's owner."""
    me = "(SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user)"
    conn.execute("SET search_path = pg_temp, durable_job, pg_catalog")
    conn.execute(f"CREATE TEMP TABLE pg_namespace AS SELECT 'durable_job'::name AS nspname, {me} AS nspowner, {me} AS oid")
    conn.execute("CREATE TEMP TABLE pg_roles AS SELECT session_user::name AS rolname, true AS rolsuper, true AS rolcanlogin")
    conn.execute("CREATE TEMP TABLE roles AS SELECT session_user::text AS role, k AS kind FROM unnest(ARRAY['person', 'worker']) k")
    conn.execute("CREATE TEMP VIEW pg_locks AS SELECT 'transactionid'::text AS locktype, NULL::xid AS transactionid")
    conn.execute(
        "CREATE TEMP TABLE jobs AS SELECT 'decided'::text AS job_id, 'x'::text AS thread_id, session_user::text AS owner, "
        "ARRAY[session_user::text] AS reviewers, NULL::timestamptz AS finished_at, '{}'::text AS record_json"
    )
    for name in ("is_admin", "is_kind", "pg_get_userbyid", "now"):
        conn.execute(f"CREATE FUNCTION pg_temp.{name}() RETURNS boolean LANGUAGE sql AS 'SELECT true'")


def test_every_function_of_the_store_has_a_fixed_search_path_and_no_trigger_is_anyones_to_call(store_url):
    admin = admin_url(store_url)
    rows = sql(
        admin,
        "SELECT p.proname, coalesce(array_to_string(p.proconfig, ','), ''), p.prosecdef, pg_get_userbyid(p.proowner), "
        "p.prorettype = 'trigger'::regtype, has_function_privilege('mallory', p.oid, 'EXECUTE') "
        "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'durable_job'",
    )
    assert len(rows) >= 19, rows
    for name, config, definer, owner, trigger, public in rows:
        assert "search_path=pg_catalog, pg_temp" in config, f"{name} has no fixed search_path: {config!r}"
        assert owner == "durable", name
        if trigger or definer:
            assert not public, f"{name} may be called by any role"


@pytest.mark.parametrize("role", PEOPLE_AND_WORKER)
def test_shadowing_the_catalog_makes_no_role_the_administrator(team, role):
    url = as_role(team.store, role)
    before = store_rows(admin_url(team.store))
    with psycopg.connect(url, autocommit=True) as conn:
        seen = {t: conn.execute(f"SELECT count(*) FROM durable_job.{t}").fetchone()[0] for t in ("jobs", "calls", "receipts")}
        shadow_everything(conn)
        assert conn.execute(
            "SELECT durable_job.is_admin(), durable_job.is_kind('worker') AND durable_job.is_kind('person')"
        ).fetchone() == (
            False,
            False,
        )
        after = {t: conn.execute(f"SELECT count(*) FROM durable_job.{t}").fetchone()[0] for t in ("jobs", "calls", "receipts")}
        assert after == seen  # the same rows as before the tricks: carol's none, the worker's all (it runs any job)
        for statement in (
            "SET ROLE durable",
            "SET SESSION AUTHORIZATION durable",
            "SET ROLE postgres",
            "SET LOCAL search_path = pg_temp",  # (harmless, outside a transaction) then the history rewrites below
            "UPDATE durable_job.decisions SET decision = 'reject'",
            "DELETE FROM durable_job.links",
            "TRUNCATE durable_job.receipts",
            "INSERT INTO durable_job.roles VALUES (session_user, 'worker')",
        ):
            try:
                conn.execute(statement)
            except psycopg.Error:
                pass
        conn.execute("RESET ROLE")
        assert conn.execute("SELECT current_user::text").fetchone()[0] == role
    assert store_rows(admin_url(team.store)) == before


def test_carols_forged_decision_for_bob_is_refused_and_the_job_verifies(team, tmp_path):
    carol = as_role(team.store, "carol")
    with psycopg.connect(carol, autocommit=True) as conn:
        shadow_everything(conn)
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(
                "INSERT INTO durable_job.decisions (job_id, kind, decision, reviewer, reason, record_json, created_utc, principal) "
                "VALUES ('waiting', 'decision', 'accept', 'Bob Reviewer', 'forged', '{}', 'now', 'bob')"
            )
        assert "row-level security" in str(caught.value)
        assert conn.execute("SELECT count(*) FROM durable_job.jobs").fetchone()[0] == 0
    assert team.run("status", "--job", "waiting").ok()["phase"] == "awaiting-review"
    assert team.run("verify", "--job", "waiting").ok()["ok"] is True


def test_a_receipt_copied_from_another_job_or_planted_before_a_decision_is_refused(team, tmp_path):
    admin = admin_url(team.store)
    copied = sql(admin, "SELECT receipt_json FROM durable_job.receipts WHERE job_id = 'decided'")[0][0]
    planted = copied.replace('"decided"', '"waiting"')  # this job's ids, the other's decision by bob
    insert = "INSERT INTO durable_job.receipts (job_id, receipt_json, written_utc) VALUES ('waiting', %s, 'now')"
    for role in ("worker", "alice", "bob"):
        assert "no decision or cancel" in refused(as_role(team.store, role), insert, (planted,)), role
    # listings still show the truth: waiting for bob, decided by nobody
    listed = {j["jobId"]: j for j in team.run("jobs", "--store", team.store).ok()["jobs"]}
    assert listed["waiting"]["phase"] == "awaiting-review"
    bob = as_(team, "bob", tmp_path)
    assert [j["jobId"] for j in bob.run("jobs", "--store", bob.store, "--to-review").ok()["jobs"]] == ["waiting"]
    # bob decides; a worker's receipt that says otherwise than his decision, or than the chain, is refused too
    bob.run("decide", "--job", "waiting", "--decision", "reject", "--reviewer", "Bob Reviewer", "--reason", "no").ok()
    if sql(admin, "SELECT count(*) FROM durable_job.receipts WHERE job_id = 'waiting'")[0][0] == 0:
        message = refused(as_role(team.store, "worker"), insert, (planted,))
        assert "decided reject by bob" in message or "does not bind its history" in message, message
        team.run("resume", "--job", "waiting").ok()
    listed = {j["jobId"]: j for j in team.run("jobs", "--store", team.store).ok()["jobs"]}
    assert listed["waiting"]["phase"] == "decided"
    assert listed["waiting"]["next"] == "decided: reject" and "bob" in json.dumps(listed["waiting"]["decidedBy"])
    assert team.run("verify", "--job", "waiting").ok()["ok"] is True


def test_a_finished_jobs_history_takes_nothing_more_from_any_role_and_still_verifies(team):
    admin = admin_url(team.store)
    before = store_rows(admin)
    link = sql(admin, "SELECT seq, link_sha256 FROM durable_job.links WHERE job_id = 'decided' ORDER BY seq DESC LIMIT 1")[0]
    thread = sql(admin, "SELECT thread_id FROM durable_job.jobs WHERE job_id = 'decided'")[0][0]
    appended = (
        (
            "INSERT INTO durable_job.call_events (job_id, operation_key, event, detail_json, at_utc) "
            "VALUES ('decided', 'k', 'dispatch', '{}', 'now')"
        ),
        (
            "INSERT INTO durable_job.links (job_id, seq, act, tbl, row_key, record_json, prev_sha256, link_sha256, at_utc) "
            f"VALUES ('decided', {link[0] + 1}, 'event', 'call_events', 'k', '{{}}', '{link[1]}', 'x', 'now')"
        ),
        (
            "INSERT INTO durable_job.drafts (job_id, version, item_id, results_json, results_sha256, reviewer, reason, change_json, "
            "created_utc) VALUES ('decided', 9, 'alpha', '[]', 'x', 'r', 'r', '{}', 'now')"
        ),
        (
            "INSERT INTO durable_job.checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
            f"VALUES ('{thread}', '', 'results', '99', 'json', '\\x5b5d')"
        ),
    )
    for role in ("worker", "alice", "bob"):
        for statement in appended:
            message = refused(as_role(team.store, role), statement)
            assert "is finished" in message or "row-level security" in message, (role, message)
    assert store_rows(admin) == before
    assert team.run("verify", "--job", "decided").ok()["ok"] is True


@pytest.mark.parametrize("role", PEOPLE_AND_WORKER)
def test_no_role_writes_any_table_directly_or_calls_a_function_it_may_not(team, role):
    url = as_role(team.store, role)
    before = store_rows(admin_url(team.store))
    first = dict(
        sql(
            admin_url(team.store),
            "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = 'durable_job'::regnamespace AND c.relkind = 'r' AND a.attnum = 1",
        )
    )
    for table in store_tables(team.store):
        change = [f"UPDATE durable_job.{table} SET {first[table]} = {first[table]}"] if table in first else []
        for statement in (*change, f"DELETE FROM durable_job.{table}", f"TRUNCATE durable_job.{table}"):
            try:
                sql(url, statement)
            except psycopg.Error:
                pass
    for function in ("finish_job", "refuse_tombstoned", "receipt_check", "refuse_finished", "stamp", "history", "call_change"):
        message = refused(url, f"SELECT durable_job.{function}()")
        assert "permission denied" in message or "trigger functions can only be called as triggers" in message, message
    assert store_rows(admin_url(team.store)) == before


def test_a_role_with_no_grant_reads_nothing_and_sees_no_content_in_any_side_channel(team):
    mallory = as_role(team.store, "mallory")
    for table in store_tables(team.store):
        assert "permission denied" in refused(mallory, f"SELECT * FROM durable_job.{table}")
    assert "permission denied" in refused(mallory, "SELECT durable_job.is_admin()")
    sql(admin_url(team.store), "ANALYZE")  # statistics hold sample values of every column
    source_line = "STRUCTURAL FIXTURE ONLY"
    for role in ("mallory", "carol"):
        url = as_role(team.store, role)
        stats = sql(url, "SELECT tablename, attname, most_common_vals::text FROM pg_stats WHERE schemaname = 'durable_job'")
        assert stats == [], (role, stats[:3])
        with psycopg.connect(url, autocommit=True) as conn:
            try:
                with conn.cursor().copy("COPY durable_job.jobs TO STDOUT") as copy:
                    copied = b"".join(bytes(block) for block in copy)
            except psycopg.Error as exc:
                copied = str(exc).encode()
        assert source_line.encode() not in copied and b"decided" not in copied, role
        locks = sql(url, "SELECT coalesce(string_agg(l::text, ' '), '') FROM pg_locks l")[0][0]
        assert source_line not in locks
    # an error names no other row's content: a taken jobId, a foreign key, a policy's refusal
    carol = as_role(team.store, "carol")
    for statement in (
        "INSERT INTO durable_job.jobs (job_id, thread_id, record_json, manifest, manifest_sha256, sources, created_utc) "
        "VALUES ('decided', 't', '{}', '\\x00', 'x', '{}', 'now')",
        "INSERT INTO durable_job.calls (job_id, operation_key, base_key, attempt, item_id, input_sha256, status, created_utc, "
        "updated_utc) VALUES ('decided', 'k:1', 'k', 1, 'alpha', 'x', 'pending', 'now', 'now')",
    ):
        message = refused(carol, statement)
        assert source_line not in message and "Bob Reviewer" not in message and "Failing row contains" not in message, message


def test_a_row_names_the_role_that_wrote_it_and_its_notification_carries_nothing(team):
    event = (
        "INSERT INTO durable_job.call_events (job_id, operation_key, event, detail_json, at_utc, principal) "
        "VALUES ('waiting', 'k', 'note', '{}', 'x', 'alice')"
    )
    with psycopg.connect(as_role(team.store, "mallory"), autocommit=True) as conn:
        conn.execute("LISTEN durable_job")
        sql(as_role(team.store, "bob"), event)  # bob says alice wrote it
        payloads = [n.payload for n in conn.notifies(timeout=5, stop_after=1)]
    assert payloads == [""]
    assert sql(admin_url(team.store), "SELECT principal FROM durable_job.call_events WHERE operation_key = 'k'") == [("bob",)]


def test_no_role_without_grants_delays_migrate_by_squatting_a_lock(tmp_path, pg_server):
    """The advisory key of old, held by mallory, and the migration table's lock attempted by her: migrate goes on."""

    url = new_store(pg_server, empty=True)
    squatter = psycopg.connect(as_role(url, "mallory"), autocommit=False)
    try:
        squatter.execute("SELECT pg_advisory_lock(x'6475726A6F627331'::bigint)")  # the key migrate waited on before
        squatter.execute("SELECT pg_advisory_lock(0), pg_advisory_lock(1)")
        started = time.monotonic()
        out = team_store.migrate_schema(url, grant=("alice",))
        assert out["changed"] is True and time.monotonic() - started < 30
        assert out["publicMay"] == ["CONNECT", "TEMPORARY"]  # and migrate says so, with the fix
        for mode in ("ACCESS SHARE", "EXCLUSIVE", "ACCESS EXCLUSIVE"):
            with pytest.raises(psycopg.Error, match="permission denied"):
                squatter.execute(f"LOCK TABLE durable_job.migrate_lock IN {mode} MODE")
            squatter.rollback()
    finally:
        squatter.close()
    # a granted role may read the lock's table, never hold a lock migrate waits for: an upgrade runs while carol reads it
    admin = admin_url(url)
    sql(admin, "DELETE FROM durable_job._migrations WHERE name = 'm010_creation_order'; DROP INDEX durable_job.jobs_by_creation")
    team_store.migrate_schema(url, grant=("carol",))
    sql(admin, "DELETE FROM durable_job._migrations WHERE name = 'm010_creation_order'; DROP INDEX durable_job.jobs_by_creation")
    reader = psycopg.connect(as_role(url, "carol"), autocommit=False)
    try:
        reader.execute("LOCK TABLE durable_job.migrate_lock IN ACCESS SHARE MODE")
        done = threading.Event()
        threading.Thread(target=lambda: (team_store.migrate_schema(url), done.set()), daemon=True).start()
        assert done.wait(30), "migrate waited for carol's read of its lock table"
    finally:
        reader.close()
    assert sql(admin, "SELECT count(*) FROM durable_job._migrations WHERE name = 'm010_creation_order'") == [(1,)]


def test_with_the_readmes_revoke_a_role_with_no_grant_cannot_even_connect_and_granted_roles_work(tmp_path, pg_server):
    """CONNECT left to PUBLIC lets any login hold a snapshot that a first set-up's CREATE INDEX CONCURRENTLY waits for;
    the README's set-up revokes it (and TEMPORARY), and `migrate --grant` gives the granted roles CONNECT."""

    url = new_store(pg_server, empty=True)
    database = url.rsplit("/", 1)[1]
    sql(url, f'REVOKE CONNECT, TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
    out = team_store.migrate_schema(url, grant=("alice", "bob"), grant_worker=("worker",))
    assert out["publicMay"] == []
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(as_role(url, "mallory")).close()
    assert "permission denied to create temporary tables" in refused(as_role(url, "alice"), "CREATE TEMP TABLE pg_namespace (x int)")
    alice = Workspace(tmp_path, store=as_role(url, "alice"))
    alice.write_manifest(reviewers=["bob"])
    assert alice.start().ok()["interrupt"]


def test_a_store_set_up_before_this_release_is_brought_under_it_and_its_granted_roles_keep_their_way_in(tmp_path, pg_server):
    """The program before m011 set the store up, granted alice and the worker, and ran alice's job to review; today's
    `migrate` applies m011 over it (the functions fixed, the receipt and finished-job rules), gives the roles granted
    before it CONNECT by name, so the README's revoke from PUBLIC locks out only the roles never granted; the old
    job is still listed and verified."""
    import subprocess

    from conftest import REPO

    old_program = tmp_path / "before_m011.py"
    old_program.write_bytes(subprocess.run(["git", "-C", REPO, "show", "9c40cdd:durable_job.py"], capture_output=True, check=True).stdout)
    url = new_store(pg_server, empty=True)
    alice = Workspace(tmp_path / "alice", store=as_role(url, "alice"))
    alice.write_manifest(jobId="old-job")
    alice.run("migrate", "--store", url, "--grant", "alice", "--grant-worker", "worker", program=str(old_program)).ok()
    assert alice.start(program=str(old_program)).ok()["interrupt"]
    admin = admin_url(url)
    assert sql(admin, "SELECT count(*) FROM durable_job._migrations WHERE name = 'm011_hostile_roles'") == [(0,)]
    assert alice.run("migrate", "--store", url).ok()["changed"] is True
    proconfig = sql(admin, "SELECT array_to_string(proconfig, ',') FROM pg_proc WHERE oid = 'durable_job.is_admin'::regproc")[0][0]
    assert proconfig == "search_path=pg_catalog, pg_temp"
    database = url.rsplit("/", 1)[1]
    sql(admin, f'REVOKE CONNECT, TEMPORARY ON DATABASE "{database}" FROM PUBLIC')
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(as_role(url, "carol")).close()  # granted by no one here
    listed = alice.run("jobs", "--store", alice.store).ok()["jobs"]
    assert [(j["jobId"], j["phase"]) for j in listed] == [("old-job", "awaiting-review")]
    assert alice.run("verify", "--job", "old-job").ok()["ok"] is True
    assert sql(as_role(url, "worker"), "SELECT count(*) FROM durable_job.jobs") == [(1,)]
