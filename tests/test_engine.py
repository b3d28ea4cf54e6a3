"""The engine and its seal (issue 46): a job seals the digest of its engine alone, so a release that changes only
what stands outside it (a help text, a renderer, the review page's CSS, a verify message, a listing's column, the
price table, the release number, the workers) strands no job, and an edit of the engine is refused naming the
release that sealed the job.

Each release here is a real copy of the program laid out as a release is (durable_job.py beside durable_job_team/),
run as its own process on a state directory and on a real PostgreSQL store.
"""

import ast
import contextlib
import os
import re
import sqlite3
import subprocess

import pytest

import durable_job as dj
from conftest import BOTH, ENGINE_MARK, PROGRAM, STORE_PY, admin_url, copy_house, engine_digest, sql, through_mark


def release(root, edits: dict) -> str:
    """A copy of the program with `edits` applied ({path from the release's top: [(old, new), ...]}); its durable_job.py."""
    program = copy_house(root)
    top = os.path.dirname(program)
    for name, pairs in edits.items():
        path = os.path.join(top, *name.split("/"))
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for old, new in pairs:
            assert text.count(old) == 1, (name, old)
            text = text.replace(old, new)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    return program


def line_of(path: str, text: str) -> int:
    """The line number a unique text starts on."""
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    assert source.count(text) == 1, text
    return source[: source.index(text)].count("\n") + 1


def mark_line(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        return fh.read().splitlines().index(ENGINE_MARK) + 1


# A release that changes nothing a job does: each edit stands below the engine's mark (checked as the test runs).
OUTSIDE = {
    "durable_job.py": [
        ('help="the job\'s state directory (one job per directory)"', 'help="the state directory that holds the job"'),  # a help text
        ("PAGE_CSS = (", 'PAGE_CSS = (\n    "h1{letter-spacing:.01em}"'),  # the review page's CSS (serve's pages reuse it)
        ('f"{verified[-1]}, signed and verified"', 'f"{verified[-1]}, signed, and the signature verified"'),  # a verify message
        ("PRICE_MAX = 1_000_000", "PRICE_MAX = 2_000_000"),  # the price table's bound
        (f'__version__ = "{dj.__version__}"', '__version__ = "9.9.9"'),  # the release itself
    ],
    "durable_job_team/store.py": [("  session_user AS me, array_to_json", "  session_user AS me,  array_to_json")],  # a listing's SQL
    "durable_job_team/cli.py": [('"CREATED (UTC)"', '"CREATED AT (UTC)"')],  # a text renderer's column (the team's `jobs`)
    "durable_job_team/workers.py": [("from __future__ import annotations\n", "from __future__ import annotations\n\n# a worker's edit\n")],
}

# Edits of the engine, each alone: the prompt, a validation rule, the journal's write (and, a store's, a migration).
INSIDE = {
    "the prompt": {"durable_job.py": [("and propose a short structured summary. ", "and propose a brief structured summary. ")]},
    "a validation rule": {"durable_job.py": [("else len(stripped) >= 12  # a short source", "else len(stripped) >= 11  # a short source")]},
    "the journal's write": {"durable_job.py": [('"INSERT INTO {outcomes} ({job_col}kind,', '"INSERT INTO {outcomes}  ({job_col}kind,')]},
}
A_MIGRATION = {"durable_job_team/migrations/m011_hostile_roles.sql": [("-- m011_hostile_roles: ", "-- m011_hostile_roles (edited): ")]}


def test_every_edit_of_the_releases_here_stands_where_it_says():
    """OUTSIDE's edits are below each file's mark (or in a file outside the engine); INSIDE's above it."""
    for name, pairs in OUTSIDE.items():
        path = os.path.join(os.path.dirname(PROGRAM), *name.split("/"))
        for old, _ in pairs:
            assert name.endswith(("workers.py", "cli.py")) or line_of(path, old) > mark_line(path), (name, old)
    for edits in INSIDE.values():
        for old, _ in edits["durable_job.py"]:
            assert line_of(PROGRAM, old) < mark_line(PROGRAM), old


def defined_names(body: list) -> set:
    """The top-level names a module's statements define (functions, classes, assignments, imports; inside an if or try too)."""
    names = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            names |= defined_names(node.body + node.orelse + [n for h in getattr(node, "handlers", []) for n in h.body])
    return names


def test_the_engine_uses_nothing_outside_itself():
    """The engine is closed: durable_job.py's mark ends a section (and the house test proves no section uses a name
    from below it), and store.py's engine takes from durable_job only names the core's engine defines, and imports no
    other module of the team's package (the workers, the web app, the notifications and traces are outside)."""
    with open(PROGRAM, encoding="utf-8") as fh:
        core = fh.read()
    below = core.split("\n" + ENGINE_MARK + "\n", 1)[1]
    assert below.lstrip("\n").startswith("#" * 79 + "\n# 13. "), "the mark stands just above a section's banner"
    engine = through_mark(PROGRAM).decode()
    store_engine = through_mark(STORE_PY).decode()
    taken = set()
    for node in ast.walk(ast.parse(store_engine)):
        if isinstance(node, ast.ImportFrom):
            assert node.module == "durable_job" or not (node.module or "").startswith("durable_job"), node.module
            if node.module == "durable_job":
                taken |= {a.name for a in node.names}
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("durable_job") for a in node.names), ast.unparse(node)
    defined = defined_names(ast.parse(engine).body)
    assert taken and taken <= defined, sorted(taken - defined)


def state(ws) -> dict:
    """Where the job stands, as status says it, without what a refused run changes (its hold and next)."""
    out = ws.run("status").ok()
    return {k: v for k, v in out.items() if k not in ("hold", "next", "sealBroken")}


@BOTH
def test_a_release_outside_the_engine_resumes_lists_decides_and_verifies_a_job_the_one_before_sealed(ws, tmp_path):
    before = release(tmp_path / "before", {})
    started = ws.run("start", "--manifest", ws.manifest, program=before).ok()
    assert started["interrupt"], started
    job = ws.job()
    assert job["engineSha256"] == engine_digest(store=bool(ws.store)) and job["release"] == dj.__version__
    assert "codeSha256" not in job and "codeFiles" not in job

    # an engine edit, each alone, is refused naming the engine and the release that sealed the job, and moves nothing
    standing = state(ws)
    for what, edits in {**INSIDE, **({"a migration": A_MIGRATION} if ws.store else {})}.items():
        edited = release(tmp_path / what.replace(" ", "-").replace("'", ""), edits)
        refused = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x", program=edited)
        refused.held(
            "Engine changed", f"sealed by engine {job['engineSha256']} (release {dj.__version__})", f"install durable-job=={dj.__version__}"
        )
        assert ws.run("resume", program=edited).code == 2, what
        assert state(ws) == standing, what

    # a release outside the engine: the job goes on with it, from every command
    after = release(tmp_path / "after", OUTSIDE)
    status = ws.run("status", program=after).ok()
    assert status["phase"] == "awaiting-review" and not status.get("sealBroken"), status
    assert ws.run("resume", program=after).ok()["interrupt"]
    listing = ["--store", ws.store] if ws.store else ["--root", ws.root]
    listed = ws.run("jobs", *listing, program=after, state=False).ok()["jobs"]
    assert [(j["jobId"], j["actsHere"]) for j in listed] == [(job["jobId"], True)]
    assert "CREATED AT (UTC)" in ws.run("jobs", *listing, "--text", program=after, state=False).stdout
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "the new release decides", program=after).ok()
    assert decided["final"]["decision"] == "accept"
    assert ws.run("verify", program=after).code == 0 and ws.run("verify").code == 0
    receipt = ws.receipt()
    assert (receipt["engineSha256"], receipt["release"]) == (job["engineSha256"], dj.__version__)  # the sealing release's


def test_version_prints_the_engine_and_the_command_that_recomputes_it(tmp_path):
    lines = subprocess.run(["python3", PROGRAM, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()
    engine = next(line for line in lines if line.startswith("engine sha256 "))
    assert engine.split()[2] == engine_digest() + ":" and f"lines 1-{mark_line(PROGRAM)}," in engine
    command = engine.rsplit("; `", 1)[1].rstrip("`)")
    assert subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout.split()[0] == engine_digest()


@pytest.mark.parametrize("ws", ["store"], indirect=True)
def test_jobs_lists_which_jobs_need_which_engine_and_status_says_how_to_go_on(ws, tmp_path):
    other = release(tmp_path / "other", INSIDE["the prompt"])
    ws.run("start", "--manifest", ws.manifest, program=other).ok()
    sealed = ws.job()["engineSha256"]
    assert sealed != engine_digest(store=True)
    listed = ws.run("jobs", "--store", ws.store, "--sealed-by-other", state=False).ok()["jobs"]
    assert [(j["jobId"], j["sealedBy"]["engineSha256"], j["sealedBy"]["release"]) for j in listed] == [
        (ws.job_id(), sealed, dj.__version__)
    ]
    status = ws.run("status").ok()
    assert status["sealBroken"].startswith(f"Engine changed: job {ws.job_id()} was sealed by engine {sealed}")
    assert status["next"].startswith(f"continue it with durable-job=={dj.__version__} (`jobs --sealed-by-other` lists such jobs)")
    assert "--state-dir" not in status["next"]


@BOTH
def test_decide_reads_where_its_job_stands_once(ws, monkeypatch):
    """One read of where a job stands a command, passed down to every check: a decide reads its job's checkpoint once
    (the program's own reader, the store's read_checkpoint; LangGraph's run reads the thread for itself), before it
    writes, and writes the receipt from what its run of the graph returned."""
    from durable_job_team import store as team_store

    assert ws.start().ok()["interrupt"]
    reader = team_store.PgStore if ws.store else dj.StateDirStore
    read = reader.read_checkpoint
    reads: list = []
    monkeypatch.setattr(reader, "read_checkpoint", lambda store, job: reads.append(job["jobId"]) or read(store, job))
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "read once").ok()
    assert decided["final"]["decision"] == "accept" and ws.receipt()["final"]["reason"] == "read once"
    assert reads == [ws.job_id()]


def reads_during(ws, request, monkeypatch, run) -> dict:
    """How many times run() read the job's `calls` and `drafts` tables, as the database saw it: a state directory's
    SQLite connections traced (sqlite3's set_trace_callback on each the command opens), a store's statements counted by
    the server (pg_stat_statements, this database only: the top-level statements the command sent)."""
    tables = ("calls", "drafts")
    if not ws.store:
        sent: list = []
        connect = sqlite3.connect

        def traced(*args, **kw):
            conn = connect(*args, **kw)
            conn.set_trace_callback(sent.append)
            return conn

        with monkeypatch.context() as patch:
            patch.setattr(sqlite3, "connect", traced)
            run()
        reads = [s for s in sent if s.lstrip().upper().startswith(("SELECT", "WITH"))]
        return {t: sum(bool(re.search(rf"\bFROM\s+{t}\b", s, re.I)) for s in reads) for t in tables}
    import psycopg

    pg_server = request.getfixturevalue("pg_server")
    name = ws.store.rsplit("/", 1)[1].split("?")[0]
    pg_server.sql("postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements", db=name)
    pg_server.sql("postgres", "SELECT pg_stat_statements_reset()", db=name)
    run()
    with psycopg.connect(ws.store, autocommit=True) as conn:
        return {
            t: int(
                conn.execute(
                    "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
                    "WHERE d.datname = current_database() AND s.query ~* '^\\s*(SELECT|WITH)' AND s.query ~ %s",
                    (rf"\mdurable_job\.{t}\M",),
                ).fetchone()[0]
            )
            for t in tables
        }


@BOTH
def test_decide_reads_its_jobs_calls_and_drafts_once(ws, request, monkeypatch):
    """One read of the job's calls and of its drafts a command: a decide reads them under the job's lock and passes
    them down to every check, the decision's record, the review's node, the receipt and the answer (the decision
    writes neither table, nor does any trigger its rows fire: test_no_trigger_writes_a_jobs_journal), and binds the
    revised draft all the same, its receipt the one verify expects from the saved rows. A resume at review, whose run
    is the review's node alone, and an inspect (the latest draft and the history) read them once too."""
    assert ws.start().ok()["interrupt"]
    summary = os.path.join(ws.root, "summary.txt")
    with open(summary, "w") as fh:
        fh.write("Alpha needs the owner's review.\n")
    revised = ws.run("revise", "--item", "alpha", "--summary-file", summary, "--reviewer", "rita", "--reason", "shorter").ok()
    digest = revised["resultsSha256"]
    resumed: dict = {}
    reads = reads_during(ws, request, monkeypatch, lambda: resumed.update(ws.run("resume").ok()))
    assert resumed["interrupt"][0]["draftVersion"] == 2 and resumed["interrupt"][0]["resultsSha256"] == digest
    assert reads == {"calls": 1, "drafts": 1}  # a resume at review runs the review's node alone; on 1.7.0: 3 and 2
    inspected: dict = {}
    reads = reads_during(ws, request, monkeypatch, lambda: inspected.update(ws.run("inspect").ok()))
    assert inspected["draftVersion"] == 2 and [d["version"] for d in inspected["drafts"]] == [2]
    assert reads == {"calls": 1, "drafts": 1}  # the latest draft and the history from one read; on 1.7.0: 1 and 2
    decided: dict = {}

    def decide():
        decided.update(
            ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "read once", "--results-sha256", digest).ok()
        )

    reads = reads_during(ws, request, monkeypatch, decide)
    assert decided["final"]["draftVersion"] == 2 and decided["final"]["resultsSha256"] == digest
    receipt = ws.receipt()
    assert receipt["draftVersion"] == 2 and receipt["resultsSha256"] == digest and receipt["final"]["reason"] == "read once"
    assert reads == {"calls": 1, "drafts": 1}  # on 1.7.0: calls 5 and drafts 4, on both
    assert ws.run("verify").code == 0


# What a function of the store's schema writes: an INSERT, UPDATE or DELETE naming a table (its string literals aside;
# an INSERT's ON CONFLICT DO UPDATE writes the table the INSERT names).
WRITES = re.compile(r"\b(?:INSERT\s+INTO|(?<!DO )UPDATE|DELETE\s+FROM)\s+(?:ONLY\s+)?(?:durable_job\.)?(\w+)", re.I)
# The functions of a set-up store that write anything, and what: the job's finished mark (m008's finish_job, as a
# receipt is written), a call's slot and a job's wait for one under the store's limits (m025's take_slot).
# None writes a journal table.
FUNCTION_WRITES = {"finish_job": {"jobs"}, "take_slot": {"slots", "slot_waits"}}


@BOTH
def test_no_trigger_writes_a_jobs_journal(ws):
    """What lets a command read its job's calls, drafts and cancel once (Context.rows) and pass them past its own writes
    of other tables (a decision's row, its link and notification, the checkpoint, the receipt): nothing but a statement
    naming a journal table writes one. A state directory's files hold no trigger. A store's triggers check a row (and
    refuse it), stamp the row being written (its principal and time: a command that writes calls or drafts reads them
    again after), notify listeners, and mark the job finished when its receipt is written; no function of its schema
    writes a journal table, none runs SQL it builds (EXECUTE), and no rule rewrites a statement. A new trigger or
    function that writes one fails here: the commands that pass rows past their writes would then read them again."""
    assert ws.start().ok()["interrupt"]
    assert ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x").ok()["final"]
    if not ws.store:
        files = [os.path.join(ws.state, name) for name in sorted(os.listdir(ws.state)) if name.endswith(".sqlite")]
        tables = set()
        for path in files:
            with contextlib.closing(sqlite3.connect(path)) as conn:
                assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall() == [], path
                tables |= {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"calls", "drafts", "outcomes", "checkpoints", "writes"} <= tables  # the journal's and LangGraph's, all looked at
        return
    admin = admin_url(ws.store)
    functions = sql(
        admin,
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'durable_job'",
    )
    triggers = sql(
        admin,
        "SELECT c.relname, p.proname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON "
        "n.oid = c.relnamespace JOIN pg_proc p ON p.oid = t.tgfoid WHERE n.nspname = 'durable_job' AND NOT t.tgisinternal",
    )
    assert ("calls", "call_change") in triggers and ("receipts", "finish_job") in triggers  # the walk finds them
    writes = {}
    for name, source in functions:
        code = re.sub(r"'(?:[^']|'')*'", "''", re.sub(r"--[^\n]*", "", source))  # its strings and comments aside
        assert not re.search(r"\bEXECUTE\b", code, re.I), name
        found = set(WRITES.findall(code))
        if found:
            writes[name] = found
    assert writes == FUNCTION_WRITES
    assert not set().union(*writes.values()) & set(dj.Dialect.TABLES)
    assert sql(admin, "SELECT rulename FROM pg_rules WHERE schemaname = 'durable_job'") == []


@BOTH
def test_a_resume_answers_from_the_calls_its_own_run_made(ws):
    """A run that may call the model writes calls as it goes: the rows its command read under the lock before it are
    read again after it (Context.forget_rows), so a resume's answer names each failed item's attempts as its run left
    them. A start killed once it sealed its job (no call made) is resumed; each item's one allowed attempt fails, and
    the answer offers no retry (the rows kept from before the run would offer one for each)."""
    ws.write_manifest(maxAttemptsPerItem=1)
    invalid = {"DURABLE_JOB_FAKE_OUTPUT": "invalid-citation"}
    assert ws.start(env={**invalid, "DURABLE_JOB_FAKE_CRASH": "after-seal"}).code == dj.CRASH_POINTS["after-seal"]
    assert ws.run("status").ok()["calls"] == []
    resumed = ws.run("resume", env=invalid).ok()
    assert [r["status"] for r in resumed["results"]] == ["failed", "failed"] and resumed["interrupt"]
    failed = resumed["failedItems"]
    assert [f["itemId"] for f in failed] == ["alpha", "beta"]
    assert all("retryCommand" not in f and "maxAttemptsPerItem" in f["retryRefused"] for f in failed), failed
