"""A shared PostgreSQL store (issue 13): a team's jobs in one database, started anywhere, resumed and decided anywhere.

The journeys common to both backends are marked @BOTH in the other test files; these are the store's own:
moving machines, six first starts on an empty database, a role without CREATE, the advisory lock when its
holder dies or loses its connection, passwords, jobs listings, addressing and the read path's imports.
"""

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import (
    PROGRAM,
    Result,
    Workspace,
    as_role,
    clean_env,
    kill_group,
    openai_workspace,
    password_of,
    read_marks,
    wait_for,
    wal_since,
)
from durable_job_team import cli as team_cli
from durable_job_team import store as team_store


def other_machine(tmp_path, store: str, name="laptop") -> Workspace:
    """A second working folder with its own HOME and no manifest or source files: only the store URL is shared."""
    root = tmp_path / name
    os.makedirs(root / "home")
    w = Workspace(root, store=store)
    shutil.rmtree(w.src)
    w.env["HOME"] = str(root / "home")
    return w


def run_job(w: Workspace, job_id: str, *args, env=None) -> Result:
    return w.run(*args, "--job", job_id, env=env)


def psql_rows(pg_server, url: str, sql: str) -> str:
    return pg_server.sql("postgres", sql, db=url.rsplit("/", 1)[1])


def test_a_job_started_on_one_machine_is_reconciled_resumed_and_decided_on_another(ws_store, tmp_path):
    ws = ws_store
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"}).code == 91
    laptop = other_machine(tmp_path, ws.store)
    status = run_job(laptop, "journey", "status").ok()
    assert status["phase"] == "uncertain-call" and status["store"] == ws.store
    key = status["calls"][0][0]
    assert f"--store {ws.store} --job journey" in status["next"]
    run_job(laptop, "journey", "resume").held("UNCERTAIN_CALL alpha")
    run_job(laptop, "journey", "reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "ops", "--reason", "no usage").ok()
    out = run_job(laptop, "journey", "resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"] and out["store"] == ws.store
    page = os.path.join(laptop.root, "review.html")
    run_job(laptop, "journey", "inspect", "--html", page).ok()
    with open(page, encoding="utf-8") as fh:  # the sources come from the store: this machine has no copy
        assert "Source not shown" not in fh.read()
    decided = run_job(
        laptop,
        "journey",
        "decide",
        "--decision",
        "accept",
        "--reviewer",
        "rev",
        "--reason",
        "ok",
        "--results-sha256",
        out["interrupt"][0]["resultsSha256"],
    ).ok()
    assert decided["final"]["decision"] == "accept"
    assert run_job(laptop, "journey", "verify").ok()["ok"] is True
    # the first machine sees the same job, decided
    assert ws.run("status").ok()["phase"] == "decided"
    assert ws.receipt()["final"] == decided["final"]


def test_six_first_starts_on_an_empty_database_all_succeed(empty_store, tmp_path):
    store_url = empty_store  # its owner's first starts set the store up
    workspaces = []
    for n in range(6):
        w = Workspace(tmp_path / f"m{n}", store=store_url)
        w.write_manifest(jobId=f"job-{n}")
        workspaces.append(w)
    procs = [w.popen("start", "--manifest", w.manifest) for w in workspaces]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out)["existing"] is False
    listed = workspaces[0].run("jobs", "--store", store_url).ok()["jobs"]
    assert sorted(j["jobId"] for j in listed) == [f"job-{n}" for n in range(6)]
    assert {j["phase"] for j in listed} == {"awaiting-review"} and {j["mode"] for j in listed} == {"fake"}
    assert set(listed[0]) == {
        "jobId",
        "phase",
        "next",
        "owner",
        "reviewers",
        "decidedBy",
        "approvedBy",
        "mode",
        "createdAtUtc",
        "tokens",
        "figures",
        "actsHere",
        "hold",
    }
    assert {j["owner"] for j in listed} == {"durable"}


def test_a_role_without_create_is_told_to_ask_its_administrator_to_migrate_and_works_after_it(empty_store, tmp_path):
    store_url, role = empty_store, "carol"  # a person's role the database knows, with no right on this one yet
    worker_url = as_role(store_url, role)
    w = Workspace(tmp_path, store=worker_url)
    w.write_manifest()
    # migrate is the administrator's act: carol is told to ask for it, named by her role, never by her own URL
    hold = w.start().held(
        "StateError", "is not set up yet", f"role {role} may not set it up", "ask them", f"migrate --store URL --grant {role}"
    )
    assert worker_url not in hold and f"{role}@" not in hold, hold
    assert w.run("submit", "--store", worker_url, "--manifest", w.manifest, state=False).held("StateError", "ask them") == hold
    migrated = w.run("migrate", "--store", store_url, "--grant", role).ok()
    assert migrated["changed"] is True and migrated["granted"] == [role]
    assert w.run("migrate", "--store", store_url).ok()["changed"] is False  # once is enough; again changes nothing
    out = w.start().ok()
    assert len(out["interrupt"]) == 1
    assert w.run("decide", "--decision", "accept", "--reviewer", role, "--reason", "ok").ok()["final"]["decision"] == "accept"
    assert w.run("verify").ok()["ok"] is True


def test_a_first_start_whose_schema_another_makes_at_that_moment_still_makes_its_lock_table(empty_store, tmp_path):
    """The race behind a rare failure of the six first starts above: another first set-up creates the schema while this
    one's CREATE SCHEMA IF NOT EXISTS waits on it, which then fails as a duplicate. The start must still create the
    migration lock's table (and not take the schema's collision for the table's), then set the store up and run."""
    import psycopg

    ws = Workspace(tmp_path, store=empty_store)
    ws.write_manifest()
    with psycopg.connect(empty_store) as other:  # the other first set-up, caught between its CREATE SCHEMA and its COMMIT
        other.execute("CREATE SCHEMA durable_job")
        proc = ws.popen("start", "--manifest", ws.manifest)

        def waits_on_the_schema() -> bool:
            with psycopg.connect(empty_store) as look:
                return bool(
                    look.execute(
                        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
                        "AND query = 'CREATE SCHEMA IF NOT EXISTS durable_job'"
                    ).fetchall()
                )

        wait_for(waits_on_the_schema, timeout=60)
    out, err = proc.communicate(timeout=120)  # the other committed as its block ended: the start's CREATE SCHEMA collided
    assert proc.returncode == 0, err
    assert json.loads(out)["interrupt"]


def test_a_start_that_finds_the_store_half_set_up_by_another_seals_its_job(empty_store, pg_server, tmp_path):
    """A first set-up adds the jobs table (m001) and its owner and reviewers (m003) in two transactions: a start
    whose first read falls between them finds no job there (it does not read columns not made yet), then sets
    the rest up under the migration lock and seals its job. The store is left as if between the two."""

    db = empty_store.rsplit("/", 1)[1]
    ((name, first),) = team_store.store_migrations(team_store.PG_MIGRATIONS[:1])
    pg_server.sql(
        "durable",
        "CREATE SCHEMA durable_job; CREATE TABLE durable_job._migrations (name TEXT PRIMARY KEY, applied_utc TEXT NOT NULL); "
        f"{'; '.join(first)}; INSERT INTO durable_job._migrations VALUES ('{name}', 'now')",
        db=db,
    )
    ws = Workspace(tmp_path, store=empty_store)
    ws.write_manifest()
    ws.run("status").held("StateError", "No job 'journey'")
    assert ws.start().ok()["existing"] is False
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def held_openai_job(ws, provider):
    """A start whose first call is out, answered only once the test calls `provider.release()`: after what it does
    meanwhile (a slow answer would have to outlast the test's commands however loaded the machine, and end no sooner)."""
    openai_workspace(ws, provider)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "60"
    provider.behave("held")
    proc = ws.popen("start", "--manifest", ws.manifest)
    wait_for(lambda: ws.has_job() and ws.db_rows(), timeout=60)
    return proc


def test_an_upgrade_waits_for_a_drained_store_migrate_naming_the_held_job(ws_store, provider, pg_server):
    ws = ws_store
    proc = held_openai_job(ws, provider)
    admin = as_role(ws.store, "durable")
    db = admin.rsplit("/", 1)[1]
    # as if this store were one migration behind the program: the next release's migration not yet recorded
    pg_server.sql("durable", "DELETE FROM durable_job._migrations WHERE name = 'm007_notify'", db=db)
    try:
        held = ws.run("migrate", "--store", admin, state=False).held(
            "BusyError", "has migrations to apply, but job journey is held by start"
        )
        assert "drain first" in held and f"pid {proc.pid}" in held and "role alice" in held
        assert pg_server.sql("durable", "SELECT count(*) FROM durable_job._migrations WHERE name = 'm007_notify'", db=db).strip() == "0"
    finally:
        provider.release()
        assert proc.wait(timeout=60) == 0  # the job goes on to its review
    pg_server.sql("durable", "DROP FUNCTION durable_job.notify_change() CASCADE", db=db)  # nor its objects made
    migrated = ws.run("migrate", "--store", admin, state=False).ok()
    assert migrated["changed"] is True
    assert ws.run("status").ok()["phase"] == "awaiting-review"


def test_a_killed_holder_frees_the_lock_readers_never_wait(ws_store, provider):
    ws = ws_store
    proc = held_openai_job(ws, provider)  # never answered: killed
    try:
        began = time.monotonic()
        status = ws.run("status").ok()
        assert time.monotonic() - began < 10
        assert status["phase"] == "running" and status["running"]["command"] == "start" and status["running"]["pid"] == proc.pid
        line = ws.run("resume").held(
            "BusyError", "Job journey busy", f"(start by role alice on host {socket.gethostname().split('.')[0]}, pid"
        )
        assert re.search(r"then run `.* resume --store \S+ --job journey` again$", line), line  # the command as typed, to paste
    finally:
        kill_group(proc)
    # the server released the dead session's lock: the next writer gets in, and meets the uncertain call
    wait_for(lambda: ws.run("status").ok()["phase"] == "uncertain-call", timeout=20)
    ws.run("resume").held("UNCERTAIN_CALL alpha")


def test_a_dropped_lock_connection_ends_the_run_with_a_hold(ws_store, provider, pg_server):
    ws = ws_store
    proc = held_openai_job(ws, provider)
    psql_rows(
        pg_server, ws.store, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'durable_job start %'"
    )
    provider.release()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("HOLD: StateError: The store") and "never reopened" in lines[0], err
    # the call's outcome is unknown: it stays pending, never repeated
    status = ws.run("status").ok()
    assert status["phase"] == "uncertain-call" and [c[2] for c in status["calls"]] == ["pending"]


def test_a_lost_lock_refuses_the_answer_that_arrives_after_it(ws_store, provider, pg_server):
    """Only the lock's connection dropped (the journal's own stays up): the statement that checks the lock goes out first
    in the answer's transaction and aborts it, so nothing of the answer is written and the call stays pending."""
    ws = ws_store
    proc = held_openai_job(ws, provider)
    killed = psql_rows(
        pg_server,
        ws.store,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'durable_job start %' "
        "AND application_name NOT LIKE 'durable_job start journal %'",
    )
    assert killed.split() == ["t"]  # the lock's connection alone
    provider.release()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    lines = err.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("HOLD: StateError: The store")
        and "the connection that held the job's lock is gone" in lines[0]
    ), err
    assert len(provider.requests()) == 1
    status = ws.run("status").ok()
    assert status["phase"] == "uncertain-call" and [c[2] for c in status["calls"]] == ["pending"]
    assert [e["event"] for e in ws.events()] == ["dispatch"]  # no completed event: the answer's transaction never committed


def test_an_answer_for_a_call_changed_meanwhile_is_refused_whole_though_nothing_waited_for_its_update(ws_store, provider, pg_server):
    """A pipelined writer sends the answer's UPDATE (WHERE the row is still pending) without waiting for its count: the
    statement counts the rows it changed and fails unless one (m017_changed_one). Here the pending row is changed while
    the call is out (by the store's administrator, as a reconcile would): the answer's transaction is aborted whole, so
    no completed event, no outcome link and no result is written, and the one HOLD says the call is not pending."""
    ws = ws_store
    proc = held_openai_job(ws, provider)
    changed = psql_rows(
        pg_server,
        ws.store,
        "UPDATE durable_job.calls SET status = 'abandoned', reconciliation_json = '{}' WHERE status = 'pending' RETURNING 1",
    )
    assert changed.split() == ["1"]
    provider.release()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("HOLD: StateError:") and "is abandoned in the journal, not pending" in lines[0], err
    assert len(provider.requests()) == 1
    assert [e["event"] for e in ws.events()] == ["dispatch"]
    links = psql_rows(pg_server, ws.store, "SELECT act || ':' || tbl FROM durable_job.links ORDER BY seq").split()
    assert links == ["seal:jobs", "call:calls", "event:call_events"], links


def test_an_item_out_of_attempts_is_reviewed_as_failed_and_the_job_goes_on_under_the_pipelined_writer(store_url, provider, tmp_path):
    """alpha's one allowed attempt was refused by the provider; resumed, its claim is rolled back (no call left) and the
    run goes on to beta on the same pipelined connection. That ROLLBACK makes psycopg forget its prepared statements:
    it must also drop them on the server before the next one is prepared (psycopg's own rollback does; a ROLLBACK sent
    as SQL left the deallocation queued behind the next statement's, and every later run of the job failed on
    `prepared statement "_pg3_N" does not exist`)."""
    ws = openai_workspace(Workspace(tmp_path, store=store_url), provider, maxAttemptsPerItem=1)
    provider.behave("429-quota")
    ws.start().held("ProviderError", "rejected")
    provider.behave("ok")
    for _ in range(2):  # and again: nothing of the first run's connection state is left to trip the next
        out = ws.run("resume").ok()
        assert [r["status"] for r in out["results"]] == ["failed", "validated"], out
        assert out["results"][0]["reason"].startswith("no model call left") and out["interrupt"]
    assert [(c[1], c[2]) for c in ws.run("status").ok()["calls"]] == [("alpha", "rejected"), ("beta", "completed")]
    assert len(provider.requests()) == 2
    assert ws.run("verify").ok()["ok"] is True


def test_no_password_in_any_output_error_or_stored_row(pg_server, store_url, tmp_path):
    secret = password_of("alice")  # alice's real password, in the URL this time: the server checks it
    url = store_url.replace("postgresql://alice@", f"postgresql://alice:{secret}@")
    w = Workspace(tmp_path, store=url)
    w.write_manifest()
    results = [w.start(env={"DURABLE_JOB_FAKE_CRASH": "before-ledger"})]
    results += [w.run("status"), w.run("inspect"), w.run("jobs", "--store", url), w.run("jobs", "--store", url, "--text")]
    key = results[1].json["calls"][0][0]
    results += [
        w.run("resume"),
        w.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "r", "--reason", "x"),
        w.run("resume"),
        w.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x"),
        w.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "again"),
        w.run("verify"),
        w.run("status", "--text"),
        w.run("status", "--job", "nope"),
        w.run("status", env={"DURABLE_JOB_STORE": url}, state=False),
        w.run("status", "--job", "journey", "--store", url.replace(str(pg_server.port), "1"), state=False),
    ]
    assert results[-1].code == 2 and "cannot be reached" in results[-1].stderr
    assert results[3].json["jobs"][0]["jobId"] == "journey"
    for r in results:
        assert secret not in r.stdout + r.stderr
    assert results[1].json["store"] == store_url
    dump = subprocess.run(
        [dj_pg_dump(), "-h", "127.0.0.1", "-p", str(pg_server.port), "-U", "postgres", "-a", store_url.rsplit("/", 1)[1]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dump.returncode == 0 and "journey" in dump.stdout and secret not in dump.stdout


def dj_pg_dump() -> str:
    from pg_server import pg_bin

    return pg_bin("pg_dump")


def test_same_manifest_continues_other_bytes_under_the_job_id_are_refused(ws_store, tmp_path):
    ws = ws_store
    first = ws.start().ok()
    again = ws.start().ok()
    assert again["existing"] is True and again["interrupt"] == first["interrupt"]
    ws.write_manifest(maxModelCalls=5)
    ws.start().held("Existing job 'journey'", "new jobId")
    # the store kept the first manifest's bytes: the changed file on disk never matters after start
    assert ws.run("resume").ok()["interrupt"]


def test_addressing_flags_and_the_store_environment_variable(ws_store, tmp_path):
    ws = ws_store
    ws.start().ok()
    ws.run("status", "--state-dir", ws.state, "--store", ws.store, "--job", "journey").held("UsageError", "not both")
    ws.run("status", "--store", ws.store, state=False).held("UsageError", "--store needs --job")
    via_env = ws.run("status", "--job", "journey", env={"DURABLE_JOB_STORE": ws.store}, state=False).ok()
    assert via_env["phase"] == "awaiting-review" and via_env["store"] == ws.store
    assert " --job journey " in via_env["next"] and "--store" not in via_env["next"]  # the variable supplies the URL
    Workspace(tmp_path / "none").run("status", state=False).held("UsageError", "DURABLE_JOB_STORE")
    ws.run("status", "--job", "other-job").held("StateError", "No job 'other-job'")


def run_without(modules: list, *args, cwd=None) -> Result:
    """The CLI in a Python where importing any of `modules` fails."""
    code = (
        "import sys, runpy\n"
        f"for name in {modules!r}: sys.modules[name] = None\n"
        f"sys.argv = [{PROGRAM!r}, *{list(args)!r}]\n"
        f"runpy.run_path({PROGRAM!r}, run_name='__main__')\n"
    )
    return Result(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), cwd=cwd, timeout=60))


def test_reads_import_neither_langgraph_nor_openai(ws_store):
    ws = ws_store
    ws.start().ok()
    address = ["--store", ws.store, "--job", "journey"]
    assert run_without(["langgraph", "openai"], "status", *address).ok()["phase"] == "awaiting-review"
    assert run_without(["langgraph", "openai"], "inspect", *address).ok()["results"]
    assert run_without(["langgraph", "openai"], "jobs", "--store", ws.store).ok()["jobs"][0]["phase"] == "awaiting-review"


def test_no_command_leaves_a_connection_open_behind_it(store_url, tmp_path):
    """Run in one process (as a caller of main() does), every command, answered or refused, closes each
    connection it opened: none is left idle on the server, and none keeps the job's lock."""
    import psycopg

    ws = Workspace(tmp_path, store=store_url)
    ws.write_manifest()

    def connections():
        with psycopg.connect(ws.store) as conn:
            return conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()

    assert ws.inprocess
    commands = [
        ("start", "--manifest", ws.manifest),
        ("status",),
        ("inspect",),
        ("jobs", "--store", ws.store),
        ("verify",),
        ("resume",),
        ("decide", "--decision", "maybe", "--reviewer", "r", "--reason", "x"),
        ("revise", "--item", "nobody", "--summary-file", ws.manifest, "--reviewer", "r", "--reason", "x"),
        ("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x"),
        ("cancel", "--reviewer", "r", "--reason", "x"),
    ]
    for argv in commands:
        r = ws.run(*argv)
        assert r.code in (0, 2), (argv, r.stderr)
        try:  # a closed connection's backend leaves pg_stat_activity a moment after the client closed it
            wait_for(lambda: connections() == [], timeout=5)
        except AssertionError:
            raise AssertionError((argv, r.stderr, connections())) from None


def test_a_read_opens_one_psycopg_connection_without_jit_unless_the_url_names_its_own_options(ws_store):
    """status, inspect and jobs read through psycopg on one connection, named as a reader and sent READER_OPTIONS
    (no JIT compilation); a URL's own `options` replace them. A real process each, psycopg.connect wrapped to
    count the connections and ask each one's server for its jit setting."""
    ws = ws_store
    ws.start().ok()
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {os.path.dirname(PROGRAM)!r})\n"
        "import psycopg, durable_job\n"
        "opened, connect = [], psycopg.connect\n"
        "def counted(*args, **kwargs):\n"
        "    conn = connect(*args, **kwargs)\n"
        "    opened.append([kwargs.get('application_name'), conn.execute('SHOW jit').fetchone()['jit']])\n"
        "    return conn\n"
        "psycopg.connect = counted\n"
        "code = durable_job.main(sys.argv[1:])\n"
        "print(json.dumps([opened, code]), file=sys.stderr)\n"
    )
    for url, jit in ((ws.store, "off"), (ws.store + "?options=-c%20jit%3Don", "on")):
        for argv in (
            ["status", "--store", url, "--job", "journey"],
            ["inspect", "--store", url, "--job", "journey"],
            ["jobs", "--store", url],
        ):
            proc = subprocess.run(
                [sys.executable, "-c", code, *argv, "--json"], capture_output=True, text=True, env=clean_env(), timeout=60
            )
            opened, exit_code = json.loads(proc.stderr.strip().splitlines()[-1])
            assert exit_code == 0, (argv, proc.stderr)
            assert len(opened) == 1 and opened[0][0].startswith("durable_job read ") and opened[0][1] == jit, (argv, opened)
            answer = json.loads(proc.stdout)
            assert (answer["jobs"][0] if "jobs" in answer else answer)["phase"] == "awaiting-review", argv


def test_without_psycopg_a_store_url_holds_naming_the_requirements_file(tmp_path):
    """A Python without site-packages has no psycopg: a store's every command, reads too, needs it."""
    code = (
        "import sys, runpy\n"
        "sys.path = [p for p in sys.path if 'site-packages' not in p]\n"
        f"sys.argv = [{PROGRAM!r}, 'status', '--store', 'postgresql://u:pw-never-shown@127.0.0.1:1/db', '--job', 'j']\n"
        f"runpy.run_path({PROGRAM!r}, run_name='__main__')\n"
    )
    r = Result(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=60))
    line = r.held("UsageError", "pip install -r requirements-postgres.txt")
    assert "pw-never-shown" not in line


def test_jobs_lists_state_directories_under_a_root(tmp_path):
    for n in range(2):
        w = Workspace(tmp_path / f"w{n}")
        w.state = str(tmp_path / "jobs" / f"job{n}")
        w.write_manifest(jobId=f"dir-job-{n}")
        w.start().ok()
    os.makedirs(tmp_path / "jobs" / "not-a-job")
    listed = Workspace(tmp_path).run("jobs", "--root", str(tmp_path / "jobs")).ok()["jobs"]
    assert [j["jobId"] for j in listed] == ["dir-job-0", "dir-job-1"]
    assert all(j["phase"] == "awaiting-review" and j["next"].startswith("python") for j in listed)
    text = Workspace(tmp_path).run("jobs", "--root", str(tmp_path / "jobs"), "--text").stdout
    assert text.splitlines()[0].split() == [
        "JOB",
        "PHASE",
        "OWNER",
        "REVIEWERS",
        "DECIDED",
        "BY",
        "MODE",
        "CREATED",
        "(UTC)",
        "FIGURES",
        "Q/S/N",
        "TOKENS",
    ]


def statements_run(pg_server, url: str, run) -> int:
    """How many statements `run()` made the store's database execute (pg_stat_statements, this database only)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    pg_server.sql("postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements", db=name)
    pg_server.sql("postgres", "SELECT pg_stat_statements_reset()", db=name)
    run()
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'"
        ).fetchone()[0]


def test_jobs_reads_a_store_in_the_same_statements_for_two_jobs_or_eight_and_no_read_takes_a_transaction_id(tmp_path, pg_server, store_url):
    """`jobs` answers from a bounded number of queries (one per kind of row), however many jobs the store holds; and no
    read (status, inspect, verify, jobs) takes a transaction id or creates anything: the next transaction id does not move."""

    def make(n):
        w = Workspace(tmp_path / f"job{n}", store=store_url)
        w.write_manifest(jobId=f"job-{n}")
        w.start().ok()
        if n % 2:
            w.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
        return w

    lister = Workspace(tmp_path / "lister", store=store_url)
    listed = {}

    def listing():
        listed["jobs"] = lister.run("jobs", "--store", store_url, state=False).ok()["jobs"]

    made = [make(n) for n in range(2)]
    few = statements_run(pg_server, store_url, listing)
    made += [make(n) for n in range(2, 8)]
    many = statements_run(pg_server, store_url, listing)
    print(f"jobs: {few} statements for 2 jobs, {many} for 8")
    assert few == many and few <= 12, (few, many)
    assert [j["jobId"] for j in listed["jobs"]] == [f"job-{n}" for n in range(8)]
    for w, row in zip(made, listed["jobs"]):  # each row says what the job's own status says
        status = w.run("status").ok()
        assert (row["phase"], row["next"]) == (status["phase"], status["next"]), row["jobId"]
    before = read_marks(store_url)
    for argv in (("status",), ("inspect",), ("verify",)):
        made[0].run(*argv).ok()
    lister.run("jobs", "--store", store_url, state=False).ok()
    lister.run("jobs", "--store", store_url, "--limit", "3", state=False).ok()
    after = read_marks(store_url)
    assert (after["xid"], after["objects"]) == (before["xid"], before["objects"])  # no transaction id, no object made
    assert wal_since(store_url, before) < 64 * 1024  # next to no WAL (a page PostgreSQL prunes itself, at most)


def test_a_store_opened_once_runs_job_after_job_on_the_same_connections_and_logs_in_again_after_a_restart(store_url, tmp_path, pg_server):
    """A program that opens a store once (a worker's thread, a caller of the command API) logs in once for each kind of
    connection (reads and journal, lock, checkpoints), not once a job; after the database restarts, the next job logs in
    anew and runs; closing the store closes them all."""
    import psycopg

    import durable_job as dj

    def ours() -> list:
        with psycopg.connect(store_url) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND application_name LIKE 'durable_job%'"
            ).fetchall()
        return sorted(r[0] for r in rows)

    ws = Workspace(tmp_path, store=store_url)
    manifests = []
    for n in range(4):
        ws.write_manifest(jobId=f"floor-{n}")
        manifests.append(shutil.copy(ws.manifest, os.path.join(os.path.dirname(ws.manifest), f"floor-{n}.json")))
    seen = []
    with dj.open_store(store=store_url) as store:
        for manifest in manifests[:3]:
            assert dj.start(store, str(manifest))["interrupt"]
            seen.append(ours())
        assert len(seen[0]) == 3 and seen[0] == seen[1] == seen[2]
        pg_server.stop()
        pg_server.start_again()
        assert dj.start(store, str(manifests[3]))["interrupt"]
        again = ours()
        assert len(again) == 3 and not set(again) & set(seen[0])
    wait_for(lambda: ours() == [], timeout=5)  # a closed connection's backend leaves a moment after the client closed it
    # the server's crash (an immediate stop) may have lost a run's last checkpoints (committed without waiting for the
    # disk): such a job stands ready, and its resume finds every answer in the journal and sends nothing again
    phases = {j["jobId"]: j["phase"] for j in team_cli.jobs(store=store_url)["jobs"]}
    assert set(phases) == {f"floor-{n}" for n in range(4)} and set(phases.values()) <= {"awaiting-review", "ready"}
    for job_id in (j for j, phase in phases.items() if phase == "ready"):
        with dj.open_store(store=store_url, job=job_id) as store:
            calls = dj.status(store)["calls"]
            assert dj.resume(store)["interrupt"] and dj.status(store)["calls"] == calls


def test_a_store_opened_once_logs_in_again_when_its_idle_sessions_were_ended_between_jobs(store_url, tmp_path, pg_server):
    """A caller of the command API keeps its store open; between two jobs an administrator ends every idle session of
    the program (pg_terminate_backend, as a restart would). A connection taken back is asked nothing when the server
    sent it nothing meanwhile, so the server's goodbye is what tells: the next job logs in anew and runs whole."""
    import durable_job as dj

    ws = Workspace(tmp_path, store=store_url)
    manifests = []
    for n in range(2):
        ws.write_manifest(jobId=f"ended-{n}")
        manifests.append(shutil.copy(ws.manifest, os.path.join(os.path.dirname(ws.manifest), f"ended-{n}.json")))
    ours = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'durable_job%' ORDER BY pid"
    with dj.open_store(store=store_url) as store:
        assert dj.start(store, str(manifests[0]))["interrupt"]
        idle = psql_rows(pg_server, store_url, ours).split()
        assert len(idle) == 3  # its journal's, its lock's and its checkpoints' connections, idle in the pool
        ended = psql_rows(pg_server, store_url, ours.replace("SELECT pid", "SELECT pg_terminate_backend(pid)"))
        assert ended.split() == ["t", "t", "t"]
        wait_for(lambda: psql_rows(pg_server, store_url, ours).split() == [], timeout=30)
        out = dj.start(store, str(manifests[1]))
        assert out["interrupt"] and {r["status"] for r in out["results"]} == {"validated"}
        again = psql_rows(pg_server, store_url, ours).split()
        assert len(again) == 3 and not set(again) & set(idle)
    with dj.open_store(store=store_url, job="ended-1") as store:
        assert dj.status(store)["phase"] == "awaiting-review"


def test_a_lost_lock_aborts_a_checkpoint_write_in_its_own_transaction(store_url, tmp_path, pg_server):
    """LangGraph's saver, as a run uses it (its connection in pipeline mode): the lock's check goes out with each write,
    in the same implicit transaction, so once the lock's connection is gone the write is refused whole and the store
    keeps the checkpoints it had."""
    import durable_job as dj

    ws = Workspace(tmp_path, store=store_url)
    ws.write_manifest()
    with dj.open_store(store=store_url) as store:
        assert dj.start(store, ws.manifest)["interrupt"]
    counts = "SELECT (SELECT count(*) FROM durable_job.checkpoints) || ' ' || (SELECT count(*) FROM durable_job.checkpoint_writes)"
    before = psql_rows(pg_server, store_url, counts)
    with dj.open_store(store=store_url, job="journey") as store, store.lock("resume"), store.checkpoint_connection(synced=False) as conn:
        from langgraph.checkpoint.base.id import uuid6

        saver = store.checkpointer(conn)
        config = {"configurable": {"thread_id": ws.job()["threadId"], "checkpoint_ns": ""}}
        latest = saver.get_tuple(config)
        saver.put_writes(latest.config, [("results", [])], "task-before")  # queued, to go out with the next checkpoint
        assert psql_rows(pg_server, store_url, counts) == before
        following = {**latest.checkpoint, "id": str(uuid6(clock_seq=-2))}  # the step's checkpoint after its writes
        saver.put(latest.config, following, latest.metadata, {})  # the lock stands: both written, in one commit
        assert psql_rows(pg_server, store_url, counts) != before
        before = psql_rows(pg_server, store_url, counts)
        killed = psql_rows(
            pg_server,
            store_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'durable_job resume %' "
            "AND application_name NOT LIKE 'durable_job resume journal %'",
        )
        assert killed.split() == ["t"]
        gone = (  # pg_terminate_backend only signals the backend: the lock's connection is gone once it has exited
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'durable_job resume %' "
            "AND application_name NOT LIKE 'durable_job resume journal %'"
        )
        wait_for(lambda: psql_rows(pg_server, store_url, gone).split() == ["0"], timeout=30)
        with pytest.raises(dj.StateError, match="the connection that held the job's lock is gone"):
            # queued behind its own lock check, or refused at once when the connection already heard the loss (psycopg
            # reads a pipeline's answers as they arrive): either way, nothing of it is written
            saver.put_writes(latest.config, [("results", [])], "task-after")
            saver.put(latest.config, latest.checkpoint, latest.metadata, {})  # the round trip that carries both: refused
        with pytest.raises(dj.StateError, match="the connection that held the job's lock is gone"):
            saver.put(latest.config, latest.checkpoint, latest.metadata, {})
    assert psql_rows(pg_server, store_url, counts) == before


def test_a_script_that_closes_its_one_store_leaves_no_connection_behind(store_url, tmp_path):
    """Through the command API: `with open_store(store=URL) as store: start(store, manifest)` (the job named by the
    manifest) and the other commands on that store close every connection they opened."""
    import psycopg

    import durable_job as dj

    ws = Workspace(tmp_path, store=store_url)
    ws.write_manifest()
    with dj.open_store(store=store_url) as store:
        assert dj.start(store, ws.manifest)["interrupt"]
    with dj.open_store(store=store_url, job="journey") as store:
        assert dj.status(store)["phase"] == "awaiting-review"
        dj.decide(store, decision="hold", reviewer="r", reason="x")
        assert team_cli.jobs(store=store_url)["jobs"][0]["phase"] == "decided"

    def left():
        with psycopg.connect(store_url) as conn:
            return conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchall()

    try:  # a closed connection's backend leaves pg_stat_activity a moment after the client closed it
        wait_for(lambda: left() == [], timeout=5)
    except AssertionError:
        raise AssertionError(left()) from None


def round_trips(trace: str) -> int:
    """Round trips in a libpq trace: each turn from what the client sends (F) to what the server answers (B)."""
    sides = [line.split("\t", 1)[0] for line in trace.splitlines() if line[:2] in ("F\t", "B\t")]
    return sum(1 for before, now in itertools.pairwise(sides) if before == "F" and now == "B")


def test_a_store_opened_once_starts_a_job_in_few_round_trips_and_renames_no_connection(store_url, tmp_path):
    """A caller of the command API keeps its store open (a worker does). A later start takes its connections back as
    they are: its work and checkpoint connections, named as before, get no statement renaming them; the lock's
    connection is named for the lock's transaction (set_config local: the holder `status` names) in the lock's own
    round trip; and the whole start stays within its round trips, counted from libpq's trace of each connection."""
    import psycopg

    import durable_job as dj

    ws = Workspace(tmp_path, store=store_url)
    manifests = []
    for n in range(2):
        ws.write_manifest(jobId=f"trips-{n}")
        manifests.append(shutil.copy(ws.manifest, os.path.join(os.path.dirname(ws.manifest), f"trips-{n}.json")))
    traced = {}
    with dj.open_store(store=store_url) as store:
        assert dj.start(store, str(manifests[0]))["interrupt"]
        named = store.pool.idle["lock"].info.parameter_status("application_name")  # the first lock's holder name (holder_name)
        began = next(word[:-1] for word in named.split() if word.endswith("Z"))  # its second, taken as the lock was
        wait_for(lambda: dj.now_utc()[:19] != began, timeout=5)  # so the next lock's holder has another name
        for kind, conn in dict(store.pool.idle).items():
            fh = open(tmp_path / f"{kind}.trace", "w")
            conn.pgconn.trace(fh.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            traced[kind] = (conn, fh)
        assert set(traced) == {"work", "lock", "checkpoints unsynced"}
        assert dj.start(store, str(manifests[1]))["interrupt"]
        for conn, fh in traced.values():
            conn.pgconn.untrace()
            fh.close()
    trace = {kind: (tmp_path / f"{kind}.trace").read_text() for kind in traced}
    assert "application_name" not in trace["work"] + trace["checkpoints unsynced"]
    assert trace["lock"].count("set_config('application_name'") == 1
    lock_turn = trace["lock"].split("\nB\t")[0]  # what the lock's connection sent before its first answer
    assert "set_config('application_name', $1, true)" in lock_turn and "FOR UPDATE NOWAIT" in lock_turn
    trips = {kind: round_trips(text) for kind, text in trace.items()}
    # 2 items: the lock and its end; the seal's checks, the seal, 3 a call, the review's reads; the saver's writes (18;
    # 30 at 701139f)
    assert trips["lock"] == 2 and trips["work"] <= 11 and trips["checkpoints unsynced"] <= 5, trips
