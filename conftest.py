"""Shared helpers for the user-journey tests: a job workspace, the CLI (in-process or as a subprocess), the loopback provider.

Every test gets its own temporary directory; nothing here touches the repository's files.

`Workspace.run` runs one CLI command. In-process (a workspace's default) it calls `durable_job.main()`
in this interpreter: environment, working directory and umask are set for the command and restored after it, stdout and stderr are captured, and the command's SQLite
connections are closed. LangGraph is then imported once per test process instead of once per
command. A command that must cross a process boundary always runs as a subprocess: a named crash
point (it ends the process), another program (`program=`), a `timeout=` the test relies on, a
PYTHON* variable (read only as an interpreter starts), a workspace made with `inprocess=False`, and
every `popen` (kills and races). Such a subprocess starts through tests/run_program.py, a script run of the
program that keeps its compiled code between runs (RUN_PROGRAM below says why and what stays the same).

The journal is read one way for either backend (and for an open `durable_job.ledger`, through `Ledger`):
`ws.calls()` and `ws.events(key, event)`, rows as dicts. `Result.held` and `assert_held` check a HOLD
refusal; `paste` runs a command the program printed, as a person pastes it.
"""

import contextlib
import gc
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types

import pytest

REPO = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(REPO, "durable_job.py")
TESTS = os.path.join(REPO, "tests")
# A command a test runs as a real process (Workspace.run when it needs one, Workspace.popen) starts as `python
# PROGRAM ARGS…` would, through tests/run_program.py, which keeps the program's compiled code between runs (the
# script's 10,000 lines compiled afresh cost each start about 0.18 s of CPU; see that file for what stays the same).
RUN_PROGRAM = os.path.join(TESTS, "run_program.py")
sys.path.insert(0, TESTS)
sys.path.insert(0, REPO)

ALPHA = (
    "STRUCTURAL FIXTURE ONLY: Alpha report requires owner review before any decision.\n"
    "The report is synthetic test input and describes no real event.\n"
)
BETA = "STRUCTURAL FIXTURE ONLY: Beta report has one unresolved field.\nThe report is synthetic test input and describes no real event.\n"
GAMMA = (
    "STRUCTURAL FIXTURE ONLY: Gamma report lists three open questions.\nThe report is synthetic test input and describes no real event.\n"
)
FAKE_KEY = "sk-test-" + "k3y" * 6  # a made-up key: never a real secret


# The boiler job (issue 34): a source whose figures an answer gets wrong, and one answer of three claims, each
# a quote of the source (the loopback provider's `answer:` behaviour); test_checked and test_web_checked share it.
BOILER = "The new boiler saves roughly 8 percent of gas a year.\nIt is serviced on Saturday at 07:00 for $1,200.\n"
THREE = "answer:" + json.dumps(
    {
        "itemId": "alpha",
        "summary": "It saves about 9 percent of gas; serviced on Saturdays.",
        "citations": [
            {"quote": "saves roughly 8 percent of gas a year", "claim": "The boiler saves about 9 percent."},
            {"quote": "serviced on Saturday at 07:00", "claim": "It is serviced on Saturday at 7am."},
            {"quote": "It is serviced on Saturday", "claim": "A service costs $1,200."},
        ],
    }
)


def sha256(data) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical(value) -> bytes:
    """The contract's canonical JSON, written out here: sorted keys, no spaces, UTF-8, non-ASCII as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def program_sha256() -> str:
    """sha256 of durable_job.py's whole bytes, as a job sealed before the engine (release 1.3.0) sealed them."""
    with open(PROGRAM, "rb") as fh:
        return sha256(fh.read())


ENGINE_MARK = "# ---- the engine ends here"  # the line that ends the engine, in durable_job.py and store.py
STORE_PY = os.path.join(REPO, "durable_job_team", "store.py")
MIGRATIONS = os.path.join(REPO, "durable_job_team", "migrations")


def through_mark(path: str) -> bytes:
    """A Python file's bytes from the first through its engine mark line, recomputed here as docs/CONTRACT.md says."""
    with open(path, "rb") as fh:
        lines = fh.read().splitlines(keepends=True)
    return b"".join(lines[: [line.rstrip(b"\n") for line in lines].index(ENGINE_MARK.encode()) + 1])


def engine_digest(store: bool = False) -> str:
    """The engine a new job seals, recomputed independently: durable_job.py through its mark (a store job's: then
    store.py through its mark and every migration whole, in name order)."""
    data = through_mark(PROGRAM)
    if store:
        data += through_mark(STORE_PY)
        for name in sorted(n for n in os.listdir(MIGRATIONS) if n.endswith(".sql")):
            with open(os.path.join(MIGRATIONS, name), "rb") as fh:
                data += fh.read()
    return sha256(data)


def in_the_engine(text: str, line: str = "# an edit inside the engine") -> str:
    """A program's text with one comment line added just above its engine mark: a release that changes the engine."""
    assert text.count("\n" + ENGINE_MARK + "\n") == 1
    return text.replace("\n" + ENGINE_MARK + "\n", "\n" + line + "\n" + ENGINE_MARK + "\n")


def past_the_engine(text: str, line: str = "# a release that changes nothing a job does") -> str:
    """A program's text with one comment line added at its end, below the engine: the engine is unchanged."""
    return text + "\n" + line + "\n"


class JournalReader:
    """A test's look at a journal: its calls and call events as dicts, read through `journal(sql)`."""

    def journal(self, sql: str) -> list:
        raise NotImplementedError

    def calls(self) -> list:
        """Every call row as a dict of its columns, in creation order (the order `status` lists them)."""
        return [dict(zip(r.keys(), r)) for r in self.journal("SELECT * FROM calls ORDER BY created_utc, rowid")]

    def events(self, key=None, event=None) -> list:
        """The call events in order as dicts, `detail` the decoded detail_json; only one key's, or one kind, if asked."""
        rows = [dict(zip(r.keys(), r)) for r in self.journal("SELECT * FROM call_events ORDER BY id")]
        return [
            {**r, "detail": json.loads(r["detail_json"]) if r["detail_json"] else None}
            for r in rows
            if key in (None, r["operation_key"]) and event in (None, r["event"])
        ]


class Ledger(JournalReader):
    """An open journal connection (durable_job.ledger), read the way a Workspace's journal is; the connection is left as it is."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def journal(self, sql: str) -> list:
        cursor = self.db.cursor()
        cursor.row_factory = sqlite3.Row
        return cursor.execute(sql).fetchall()


class Workspace(JournalReader):
    """A temporary folder with sources, a manifest and a state directory, as a user would lay them out."""

    def __init__(self, root, inprocess: bool = True, store=None):
        self.root = str(root)
        self.src = os.path.join(self.root, "src")
        self.state = os.path.join(self.root, "state")
        self.manifest = os.path.join(self.src, "manifest.json")
        os.makedirs(self.src, exist_ok=True)
        self.env = {}
        # run commands through durable_job.main() unless one needs a process (Workspace(..., inprocess=False), a
        # run's `timeout`, a fake crash, another program or interpreter flags): a state directory's and a store's alike
        self.inprocess = inprocess
        self.store = store  # a PostgreSQL store URL: the job lives there (`--store URL --job ID`), not in self.state

    def job_id(self) -> str:
        with open(self.manifest, "rb") as fh:
            return json.loads(fh.read())["jobId"]

    @property
    def principal_label(self) -> str:
        """How outputs name the principal: a store's role, a state directory's account."""
        return "role" if self.store is not None else "account"

    def principal(self) -> str:
        """Who this workspace's commands act as: the store URL's role, or the operating-system account."""
        if self.store is not None:
            return self.store.split("://", 1)[1].split("@", 1)[0].split(":", 1)[0]
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name

    def address(self, args) -> list:
        """The flags that name this workspace's job, for a command that names none itself."""
        if not args or args[0] in ("seal", "jobs", "migrate") or "--state-dir" in args or "--store" in args:
            return []
        if self.store is None:
            return ["--state-dir", self.state]
        return ["--store", self.store] + ([] if args[0] == "start" or "--job" in args else ["--job", self.job_id()])

    def journal(self, sql: str) -> list:
        """Rows of a journal query (by name or position), from effects.sqlite or the store's rows of this job."""
        if self.store is None:
            conn = sqlite3.connect(os.path.join(self.state, "effects.sqlite"))
            conn.row_factory = sqlite3.Row
            try:
                return conn.execute(sql).fetchall()
            finally:
                conn.close()
        return store_journal(self.store, self.job_id(), sql)

    def pg_store(self):
        """The job's store (durable_job.open_store) for a test's own look, its connection closed afterwards."""
        import contextlib

        import durable_job

        return contextlib.closing(durable_job.open_store(store=self.store, job=self.job_id()))

    def has_job(self) -> bool:
        if self.store is None:
            return os.path.exists(os.path.join(self.state, "job.json"))
        with self.pg_store() as store:
            return store.has_job()

    def receipt(self):
        """The job's receipt as a dict (receipt.json, or the store's receipts row), None without one."""
        if self.store is None:
            path = os.path.join(self.state, "receipt.json")
            return json.load(open(path)) if os.path.exists(path) else None
        with self.pg_store() as store:
            raw = store.read_receipt()
        return None if raw is None else json.loads(raw)

    def write_source(self, name: str, text) -> str:
        path = os.path.join(self.src, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
        return path

    def manifest_dict(self, sources=None, **overrides) -> dict:
        """A valid manifest over {id: text} sources (written as <id>.txt), with overrides applied."""
        sources = sources if sources is not None else {"alpha": ALPHA, "beta": BETA}
        items = []
        for item_id, text in sources.items():
            self.write_source(f"{item_id}.txt", text)
            data = text.encode("utf-8") if isinstance(text, str) else text
            items.append({"id": item_id, "path": f"{item_id}.txt", "sha256": sha256(data)})
        manifest = {
            "schemaVersion": 1,
            "jobId": "journey",
            "approved": True,
            "approvedBy": "owner@example.test",
            "mode": "fake",
            "model": "fake-structural-1",
            "providerTransferApproved": False,
            "maxModelCalls": 6,
            "maxAttemptsPerItem": 2,
            "items": items,
        }
        manifest.update(overrides)
        if manifest["mode"] == "openai" and "providerTransferApproved" not in overrides:
            manifest["providerTransferApproved"] = True
        return manifest

    def write_manifest(self, manifest=None, sources=None, raw: bytes | None = None, **overrides) -> str:
        if raw is None:
            manifest = manifest if manifest is not None else self.manifest_dict(sources, **overrides)
            raw = (json.dumps(manifest, indent=2) + "\n").encode()
        with open(self.manifest, "wb") as fh:
            fh.write(raw)
        return self.manifest

    def run(self, *args, env=None, timeout=None, state=True, program=None, inprocess=None) -> "Result":
        """Run one CLI command as a person at a terminal would (stdout piped, so JSON).

        In-process when the workspace (or `inprocess=True`) asks for it and nothing needs a process
        boundary; otherwise in a subprocess (killed after `timeout` seconds, default 120).
        """
        argv = list(args)
        if state:
            argv += self.address(args)
        full_env = clean_env()
        full_env.update(self.env)
        full_env.update(env or {})
        inprocess = self.inprocess if inprocess is None else inprocess
        startup = [k for k in {**self.env, **(env or {})} if k.startswith("PYTHON")]  # read by an interpreter as it starts
        if inprocess and program is None and timeout is None and "DURABLE_JOB_FAKE_CRASH" not in full_env and not startup:
            return run_inprocess(argv, full_env, cwd=self.root)
        proc = subprocess.run(
            [sys.executable, RUN_PROGRAM, program or PROGRAM, *argv],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout or 120,
            cwd=self.root,
        )
        return Result(proc)

    def popen(self, *args, env=None, program=None) -> subprocess.Popen:
        argv = [sys.executable, RUN_PROGRAM, program or PROGRAM, *args, *self.address(args)]
        full_env = clean_env()
        full_env.update(self.env)
        full_env.update(env or {})
        # its own process group (and session): kill_group then reaches every process the command started
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env, cwd=self.root, start_new_session=True
        )

    def start(self, **kw) -> "Result":
        return self.run("start", "--manifest", self.manifest, **kw)

    def db_rows(self, sql="SELECT operation_key, item_id, status, attempt FROM calls ORDER BY rowid") -> list:
        return [tuple(r) for r in self.journal(sql)]

    def state_bytes(self) -> dict:
        """Everything the job has saved, to prove nothing changed: every file of the state directory, name → bytes,
        or every row of the store's schema, table → rows (each store test has a database of its own)."""
        return store_rows(self.store) if self.store is not None else file_bytes(self.state)

    def job(self) -> dict:
        if self.store is not None:
            with self.pg_store() as store:
                return store.load_job()
        with open(os.path.join(self.state, "job.json")) as fh:
            return json.load(fh)


# what a receipt made since issue 43 holds that no signature covers: written after its act (verify --receipt FILE names them)
NEW_RECEIPT_UNSIGNED = [
    "chainHead",
    "schemaVersion",
    "writtenAtUtc",
    "final.signature.format",
    "final.signature.namespace",
    "final.signature.signedAtUtc",
]


def file_bytes(state) -> dict:
    """Every regular file of a state directory (run.lock aside: its note is rewritten by design), name → bytes."""
    out = {}
    for name in sorted(os.listdir(state)) if os.path.isdir(state) else []:
        path = os.path.join(state, name)
        if name != "run.lock" and os.path.isfile(path) and not name.endswith(("-shm", "-wal")):
            with open(path, "rb") as fh:
                out[name] = fh.read()
    return out


# A test's own view of one job's journal rows in a store, under the state directory's table names, so that one
# SQL text reads either backend (`rowid` is the store's insertion order, `seq`). The views live in the test's
# connection only: durable_job itself never creates one.
STORE_JOURNAL_VIEWS = {
    "calls": "operation_key, base_key, attempt, item_id, input_sha256, status, output_text, response_id, request_id, "
    "usage_json, created_utc, updated_utc, reconciliation_json, seq AS rowid",
    "call_events": "id, operation_key, event, detail_json, at_utc",
    "drafts": "version, item_id, results_json, results_sha256, reviewer, reason, change_json, created_utc",
    "outcomes": "kind, record_json, created_utc",
}


def store_journal(url: str, job_id: str, sql: str) -> list:
    """Rows (read by name or position) of an SQLite-spelled journal query against one job of a store."""
    import psycopg

    class Row(tuple):
        def __new__(cls, values, names):
            row = super().__new__(cls, values)
            row.names = names
            return row

        def __getitem__(self, key):
            return tuple.__getitem__(self, self.names.index(key) if isinstance(key, str) else key)

        def keys(self):
            return list(self.names)

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('tests.job', %s, false)", (job_id,))
        for view, columns in STORE_JOURNAL_VIEWS.items():
            conn.execute(f"CREATE TEMP VIEW {view} AS SELECT {columns} FROM durable_job.{view} WHERE job_id = current_setting('tests.job')")
        cursor = conn.execute(sql)
        names = [c.name for c in cursor.description or []]
        return [Row(r, names) for r in cursor.fetchall()]


def read_marks(url: str) -> dict:
    """What a read must leave as it was, seen from another session: the next transaction id, the number of
    objects (pg_class), and where the write-ahead log stands (its bytes since, with wal_since)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        xid, objects, wal = conn.execute(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text, (SELECT count(*) FROM pg_class), pg_current_wal_insert_lsn()::text"
        ).fetchone()
    return {"xid": int(xid), "objects": objects, "wal": wal}


def wal_since(url: str, marks: dict) -> int:
    """The bytes of write-ahead log written since read_marks(url) was taken."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", (marks["wal"],)).fetchone()[0])


def store_rows(url: str) -> dict:
    """Every table of the store's durable_job schema, name → its rows (as text, sorted)."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'durable_job' AND table_type = 'BASE TABLE'"
            )
        ]
        assert tables, f"no durable_job tables in {url}"
        return {name: sorted(map(repr, conn.execute(f'SELECT * FROM durable_job."{name}"').fetchall())) for name in sorted(tables)}


class Result:
    """A finished command: exit code, parsed JSON (when it printed JSON), stderr."""

    def __init__(self, proc):
        self.code = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.json = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            self.json = None

    def ok(self) -> dict:
        assert self.code == 0, f"exit {self.code}\nstdout: {self.stdout}\nstderr: {self.stderr}"
        assert self.json is not None
        return self.json

    def held(self, *phrases) -> str:
        """Assert a one-line HOLD refusal with exit 2 and no traceback; return the line."""
        return assert_held(self.code, self.stdout, self.stderr, *phrases)


def assert_held(code, stdout, stderr, *phrases) -> str:
    """A finished command (run or Popen'd) was refused: exit 2, one HOLD line holding every phrase, no traceback; the line."""
    assert code == 2, f"exit {code}\nstdout: {stdout}\nstderr: {stderr}"
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("HOLD: "), stderr
    assert "Traceback" not in stderr + stdout
    for phrase in phrases:
        assert phrase in lines[0], f"{phrase!r} not in {lines[0]!r}"
    return lines[0]


def new_key_file(folder, name: str = "kek") -> str:
    """A key-encryption key as an administrator makes one: 32 random bytes in a private file (never a fixture)."""
    path = os.path.join(str(folder), name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
        fh.write(os.urandom(32))
    return path


def encoded_forms(texts) -> dict:
    """Each text as bytes in every encoding a file or a dump may hold it: UTF-8, UTF-16 (both orders), JSON-escaped
    (non-ASCII as \\u escapes, and as is), and a base64 of its UTF-8 (what a careless `bytea` or JSON blob would show)."""
    import base64

    forms = {}
    for text in texts:
        for name, data in {
            "utf-8": text.encode(),
            "utf-16-le": text.encode("utf-16-le"),
            "utf-16-be": text.encode("utf-16-be"),
            "json": json.dumps(text)[1:-1].encode(),
            "json-utf8": json.dumps(text, ensure_ascii=False)[1:-1].encode(),
            "base64": base64.b64encode(text.encode())[:24],
            "hex": text.encode().hex().encode(),  # a bytea column as pg_dump writes it
        }.items():
            forms[(text, name)] = data
    return forms


def found_forms(blobs: dict, texts) -> list:
    """(where, text, encoding) of each text found in any of the blobs ({name: bytes})."""
    return [(where, text, how) for (text, how), data in encoded_forms(texts).items() for where, blob in blobs.items() if data in blob]


def pg_dump(pg_server, url: str, path: str) -> bytes:
    """A plain-SQL dump of a store's whole database as a backup takes it (by the server's superuser: every row); its bytes."""
    from pg_server import passfile, pg_bin

    database = url.rsplit("/", 1)[1]
    argv = [pg_bin("pg_dump"), "-h", "127.0.0.1", "-p", str(pg_server.port), "-U", "postgres", "-d", database, "-f", path]
    subprocess.run(argv, check=True, capture_output=True, timeout=120, env={**os.environ, "PGPASSFILE": passfile()})
    with open(path, "rb") as fh:
        return fh.read()


def pg_restore(pg_server, path: str) -> str:
    """A dump restored into a new database of the same server, as an administrator restores a backup; its owner's URL."""
    import uuid

    from pg_server import passfile, pg_bin

    url = pg_server.new_database("r" + uuid.uuid4().hex[:16])
    argv = [pg_bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(pg_server.port), "-U", "postgres"]
    subprocess.run(
        [*argv, "-d", url.rsplit("/", 1)[1], "-f", path],
        check=True,
        capture_output=True,
        timeout=120,
        env={**os.environ, "PGPASSFILE": passfile()},
    )
    return url


def paste(ws: Workspace, command: str, cwd=None, **fill) -> Result:
    """Run a printed command as a person pastes it into a shell, placeholders filled in (`YOU="dana"`): `python`
    is this interpreter, the environment the workspace's, the folder its root unless `cwd` says."""
    argv = [fill.get(word, word) for word in shlex.split(command)]
    assert argv[:2] == ["python", PROGRAM], command  # the program as it was invoked, nothing left to add
    proc = subprocess.run(
        [sys.executable, *argv[1:]], capture_output=True, text=True, env={**clean_env(), **ws.env}, cwd=cwd or ws.root, timeout=120
    )
    return Result(proc)


def make_key(folder, name: str, passphrase: str = "") -> str:
    """A fresh ed25519 key pair (PATH and PATH.pub) made by ssh-keygen, as a person makes theirs."""
    path = os.path.join(str(folder), name)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", name, "-f", path], check=True)
    return path


def allowed_signers(folder, name: str, *entries) -> str:
    """git's allowed_signers file: (principal, key path, extra options) a line."""
    path = os.path.join(str(folder), name)
    with open(path, "w") as fh:
        for principal, key, options in entries:
            with open(key + ".pub") as pub:
                fh.write(f'{principal} namespaces="durable-job"{options} {pub.read().strip()}\n')
    return path


_INPROCESS = threading.RLock()  # environment, working directory and umask belong to the whole process
# Hypothesis loaded before any freeze below: on import it runs its plugins (trio's registers its PRNG), and
# register_random's gc.get_referrers would not see referrers that a freeze had set aside (a HypothesisWarning).
import hypothesis  # noqa: E402, F401

_FROZEN_AT = [0]  # how many modules were loaded when this process last froze what it holds (gc.freeze)


def run_inprocess(argv: list, env: dict, cwd: str) -> Result:
    """One CLI command through durable_job.main() in this process, leaving the process as it found it.

    Environment, working directory and umask are the command's while it runs and restored afterwards
    (one command at a time: they are the process's, not a thread's); its stdout and stderr are captured;
    `--help` (SystemExit) becomes its exit code. The command's objects (its Context, graph and
    checkpointer hold SQLite connections in reference cycles) are collected at once, which closes
    those connections, so no lock or file handle outlives the command.

    That collection looks only at objects made since the process last froze what it held (gc.freeze): once a
    command has loaded modules not loaded before (LangGraph, the SDK, psycopg: some 150,000 objects that live as long
    as the process), what is alive after its collection is frozen, so the next commands' collections skip them. A
    full collection over them cost about 80 ms of CPU a command (2026-12-05: 15 s of test_durable_job.py's 40 s).
    Freezing changes no object's reference count: what is frozen is still freed when nothing refers to it.
    """
    import durable_job

    with _INPROCESS:
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        saved_umask = os.umask(0o022)
        os.umask(saved_umask)
        out, err = io.StringIO(), io.StringIO()
        try:
            set_environ(env)
            os.chdir(cwd)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = durable_job.main(argv)
                except SystemExit as exc:  # argparse's --help
                    code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        finally:
            os.chdir(saved_cwd)
            os.umask(saved_umask)
            set_environ(saved_env)
            gc.collect()
            if len(sys.modules) > _FROZEN_AT[0]:  # modules loaded since the last freeze: keep them out of later collections
                gc.freeze()
                _FROZEN_AT[0] = len(sys.modules)
    return Result(types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue()))


def set_environ(env: dict) -> None:
    """Make os.environ exactly env, touching only the names that differ (other threads may be reading it)."""
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def clean_env() -> dict:
    """The machine's environment without any provider or crash settings leaking in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DURABLE_JOB_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# The team's package and the optional libraries, as if none were installed: a copy of durable_job.py run alone.
TEAM_LIBRARIES = ["durable_job_team", "psycopg", "psycopg_pool", "langgraph.checkpoint.postgres", "starlette", "uvicorn", "jinja2", "mcp"]


def run_alone(program: str, args, cwd: str, env: dict | None = None, missing: tuple = ()) -> "Result":
    """`python PROGRAM ARGS` (a copy of durable_job.py) in a Python where none of TEAM_LIBRARIES (nor any module named
    in `missing`) can be imported, with `env` added to the clean environment."""
    code = (
        "import sys, runpy\n"
        f"for name in {[*TEAM_LIBRARIES, *missing]!r}: sys.modules[name] = None\n"
        f"sys.argv = [{program!r}, *{list(args)!r}]\n"
        f"runpy.run_path({program!r}, run_name='__main__')\n"
    )
    full_env = {**clean_env(), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120)
    return Result(proc)


from pg_server import free_port  # noqa: E402  (tests/ is on sys.path above): a loopback port with nothing listening

STORE_TEMPLATE = "store_template"  # a store migrated once per server, as a team's administrator sets one up


def pytest_configure(config):
    """Ctrl-C reaches the commands the tests start, as it reaches a terminal's foreground job: a suite started where
    SIGINT is ignored (a shell script's background job, `make test &`) would pass that on to every child, and a
    program started with SIGINT ignored rightly never sees it (tests/test_new_user.py's Ctrl-C journeys)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a handler: a child starts with the default again


# The longest tests (10-40 s each on this 2-core machine; `make test` prints the ten slowest), slowest first: they
# are collected first so that they start first. pytest-xdist's worksteal hands each worker a contiguous share of the
# collection and an idle worker takes the END of a busy worker's queue, so a long test collected last (test_work.py and
# test_web_hostile.py sort last by name) could start last and leave one core idle while it runs. A name here matches
# a test id by substring; every other test keeps its place. Order only: no test is added, dropped or changed.
SLOW_FIRST = (
    "test_web_hostile.py::test_a_page_kept_busy_by_the_store_keeps_no_one_signed_in",
    "test_faults.py::test_random_kills_over_real_http",
    "test_work.py::test_random_sigkills_of_several_workers",
    "test_notify.py::test_a_webhook_gets_every_event_of_a_job_run_by_a_worker",
    "test_work.py::test_sigterm_mid_call",
    "test_web.py::test_a_reviewer_follows_and_decides_a_job_from_a_phone",
    "test_passkeys.py::test_a_passkey_that_never_answers",
    "test_web_attacker.py::test_a_body_over_a_mebibyte_or_trickled_in",
    "test_docs.py::test_the_readmes_first_job_runs_as_printed",
    "test_work.py::test_a_job_needing_a_person_is_skipped",
    "test_passkeys.py::test_bob_signs_his_decision_with_his_phones_passkey",
    "test_faults.py::test_kill_at_each_crash_point_then_runbook_recovery",
    "test_chat.py::test_a_chat_job_through_the_litellm_proxy",
    "test_rate_limits.py::test_a_three_item_job_rate_limited_three_times",
    "test_writer.py::test_a_kill_at_each_point_around_the_writers_call",
    "test_web_hostile.py::",
)


# Collected last: the type checker's test copies the tree's mypy cache, which `make test` writes beside the suite
# (scripts/test.sh); collected at the end it starts minutes in, warm (3 s), where at the start it would run cold (20-50 s).
LAST = ("test_tools.py::test_the_type_checker_catches",)


# Journeys that mostly wait on the clock (a minute's rate limit, an idle sign-out, a slow receiver, a trickled body, a
# passkey that never answers, a provider's Retry-After, an answer trickled past its deadline, a page's reconcile waiting
# out a held job's busy wait): 3-90 s each of wall time for a few seconds of CPU. Marked `waits`; `make test`
# (scripts/test.sh) runs them in a pytest process of their own beside the rest, so their waiting overlaps the rest's
# work instead of idling one of the two workers (`pytest` alone still runs them with the rest).
WAITS = (
    "test_limits.py::test_eight_workers_under_one_shared_limit",
    "test_web_hostile.py::test_a_page_kept_busy_by_the_store_keeps_no_one_signed_in",
    "test_notify.py::test_a_webhook_gets_every_event_of_a_job_run_by_a_worker",
    "test_limits.py::test_a_run_with_no_slot_free_waits",
    "test_limits.py::test_a_worker_told_to_stop_ends_its_wait",
    "test_web_attacker.py::test_a_body_over_a_mebibyte_or_trickled_in",
    "test_passkeys.py::test_a_passkey_that_never_answers",
    "test_rate_limits.py::test_a_three_item_job_rate_limited_three_times",
    "test_rate_limits.py::test_each_way_a_provider_says_how_long_to_wait",
    "test_openai_http.py::test_an_answer_that_trickles_in_is_cut_at_the_deadline",
    "test_phone_reconcile.py::test_a_reconcile_from_the_page_waits_for_the_command_holding_the_job",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks added here
def pytest_collection_modifyitems(session, config, items):
    """Mark the WAITS tests `waits`; move the SLOW_FIRST tests to the front, in that list's order, and LAST to the end
    (a stable sort: the rest keep their order)."""
    for item in items:
        if any(name in item.nodeid for name in WAITS):
            item.add_marker(pytest.mark.waits)

    def rank(item) -> int:
        if any(name in item.nodeid for name in LAST):
            return len(SLOW_FIRST) + 1
        return next((n for n, name in enumerate(SLOW_FIRST) if name in item.nodeid), len(SLOW_FIRST))

    items.sort(key=rank)


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL for the session (one per xdist worker); every test takes its own database.

    Its store template is set up as the README tells a team to: `migrate` by the administrator (durable),
    granting alice, bob and carol as people and `worker` as a worker.

    Its folder is a temporary folder of its own, not under pytest's /tmp/pytest-of-USER: the postgres user must
    traverse every folder above the data directory (PgServer.start opens them), and any other pytest session started
    on the machine meanwhile makes /tmp/pytest-of-USER private again (mode 0700), after which the server could not be
    started again by a test that stops it (test_web's database going away and coming back). Removed after the session,
    by a process of its own that the session does not wait for: a worker's databases (a copy of the template for each
    store test) took up to 58 s to remove, in the last test's teardown (2026-12-05, a loaded machine).
    """
    import tempfile

    from pg_server import PgServer

    folder = tempfile.mkdtemp(prefix="durable-job-tests-pg-")
    try:
        server = PgServer.start(folder)
        try:
            template = server.new_database(STORE_TEMPLATE)
            from durable_job_team import store as team_store

            team_store.migrate_schema(template, grant=("alice", "bob", "carol"), grant_worker=("worker",))
            yield server
        finally:
            server.stop()
    finally:
        subprocess.Popen(["rm", "-rf", "--", folder], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def new_store(pg_server, role: str = "alice", *, empty: bool = False) -> str:
    """A fresh store on the session's server, as `role` logs in to it: a set-up copy of the template, or an empty
    database (its owner, the administrator, sets it up on first use)."""
    import uuid

    url = pg_server.new_database("t" + uuid.uuid4().hex[:16], template=None if empty else STORE_TEMPLATE)
    return url if empty else as_role(url, role)


def as_role(url: str, role: str) -> str:
    """The same store, logging in as another role (its password comes from PGPASSFILE, never the URL)."""
    head, _, rest = url.partition("://")
    return f"{head}://{role}@{rest.split('@', 1)[1]}"


def admin_url(url: str) -> str:
    """The store as its administrator (the schema's owner) reaches it: for a test that tampers with rows."""
    return as_role(url, "durable")


def password_of(role: str) -> str:
    """A test role's password, from the session's pgpass file (for the one test that puts a password in a URL)."""
    with open(os.environ["PGPASSFILE"]) as fh:
        return next(line.rstrip("\n").split(":", 4)[4] for line in fh if line.split(":")[3] == role)


def as_(ws: Workspace, role: str, tmp_path) -> Workspace:
    """The same job's store, reached by another person from their own folder (no manifest, no sources)."""
    root = tmp_path / f"{role}-desk"
    os.makedirs(root, exist_ok=True)
    other = Workspace(root, store=as_role(ws.store, role))
    shutil.rmtree(other.src)
    shutil.copytree(ws.src, other.src)  # the same request, byte for byte, and its sources: as a colleague's copy would be
    return other


def sql(url: str, statement: str, params=()) -> list:
    """Rows of one statement run by the role the URL logs in as (psycopg, autocommit)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def refused(url: str, statement: str, params=()) -> str:
    """The database's own refusal of a statement, as that role (it must be refused)."""
    import psycopg

    with pytest.raises(psycopg.Error) as caught:
        sql(url, statement, params)
    return str(caught.value)


@pytest.fixture
def store_url(pg_server) -> str:
    """A set-up store, as alice (a person granted by the administrator) logs in to it."""
    return new_store(pg_server)


@pytest.fixture
def empty_store(pg_server) -> str:
    """An empty database, as its owner (the store's administrator to be) logs in to it."""
    return new_store(pg_server, empty=True)


@pytest.fixture
def ws(tmp_path, request) -> Workspace:
    """A workspace with the two demo sources and a valid fake-mode manifest.

    Its job lives in a state directory, or in a fresh PostgreSQL store when a
    test is marked BOTH (parametrised indirectly with "dir" and "store").
    """
    backend = getattr(request, "param", "dir")
    store = new_store(request.getfixturevalue("pg_server")) if backend == "store" else None
    w = Workspace(tmp_path, store=store)
    w.write_manifest()
    return w


@pytest.fixture
def ws_store(tmp_path, store_url) -> Workspace:
    """A workspace whose job lives in a fresh PostgreSQL store."""
    w = Workspace(tmp_path, store=store_url)
    w.write_manifest()
    return w


# The journeys that must hold for both backends: @BOTH on a test that takes `ws`.
BOTH = pytest.mark.parametrize("ws", ["dir", "store"], indirect=True)


class Provider:
    """The loopback Responses-API server (tests/provider_server.py) and its own request log."""

    def __init__(self, root, port=0):
        import provider_server

        self.module = provider_server
        self.log = os.path.join(str(root), "provider.log")
        self.behaviour_file = os.path.join(str(root), "behaviour.json")
        self.behave("ok")
        self.base_url, self.server = provider_server.start_server(self.log, self.behaviour_file, port)

    def behave(self, default="ok", sequence=None, by_input=None) -> None:
        with open(self.behaviour_file, "w") as fh:
            json.dump({"default": default, "sequence": sequence or [], "by_input_contains": by_input or {}}, fh)

    def requests(self) -> list:
        if not os.path.exists(self.log):
            return []
        with open(self.log) as fh:  # a line the server is still writing (no newline yet) is not a request logged yet
            return [json.loads(line) for line in fh if line.endswith("\n") and line.strip()]

    def release(self) -> None:
        """The server answers every call it holds (behaviour "held") and finishes every response it keeps in progress
        (behaviour "kept-held"): those now, and any later one at once."""
        with open(self.log + ".release", "w"):
            pass

    def response_file(self, logged: dict, path: str) -> str:
        """The --response-file a person writes from one line of this server's log, for an answer that never arrived."""
        with open(path, "w") as fh:
            json.dump({"outputText": logged["output_text"], "responseId": logged["response_id"], "requestId": f"req_{logged['seq']}"}, fh)
        return path

    def env(self, **extra) -> dict:
        env = {"OPENAI_API_KEY": FAKE_KEY, "OPENAI_BASE_URL": self.base_url}
        env.update(extra)
        return env

    def stop(self):
        self.module.stop_server(self.server)


@pytest.fixture
def provider(tmp_path):
    p = Provider(tmp_path)
    yield p
    p.stop()


def openai_workspace(ws: Workspace, provider: Provider, sources=None, **overrides) -> Workspace:
    """Turn a workspace into an openai-mode job pointed at the loopback provider."""
    ws.write_manifest(sources=sources, mode="openai", model="gpt-test", **overrides)
    ws.env.update(provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))
    return ws


@pytest.fixture
def other_page():
    """A web page on another port of this host, as an attacker's page would be: `other_page(pages, port=0)` serves
    {path: html} (404 for any other path; a callable of the path may stand for the dict) from http://localhost:PORT
    (0: any free port) and returns that origin; every such server stops after the test, passed or failed."""
    import http.server

    started = []

    def start(pages, port: int = 0) -> str:
        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                html = pages(self.path) if callable(pages) else pages.get(self.path)
                if html is None:
                    self.send_error(404)
                    return
                body = html.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return f"http://localhost:{server.server_address[1]}"

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


# -- a reviewer's phone: one real Chromium per pytest worker, cleaned for each test ------------------------------------


def start_phone(folder: str):
    """Debian's Chromium, driven by Debian's chromedriver, as a 390×844 phone screen (no network but loopback); its
    profile and chromedriver's log in `folder`. A test needing another configuration (other flags, a size that is
    not a phone's, a page-load strategy) starts its own from options of its own, and says why."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert os.path.exists("/usr/bin/chromedriver"), "Debian's chromium-driver is needed: apt-get install -y chromium-driver"
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        f"--user-data-dir={folder}/chromium-profile",
    ):
        options.add_argument(arg)
    options.add_experimental_option("mobileEmulation", {"deviceMetrics": {"width": 390, "height": 844, "pixelRatio": 2}})
    service = Service(executable_path="/usr/bin/chromedriver", log_output=os.path.join(folder, "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    return driver


def wipe_phone(driver) -> None:
    """Everything a test left in the phone gone, as a phone just started has it: one blank tab, every other tab and
    window closed (with them their sessionStorage, their script state, any device-metrics override sent over CDP,
    and their WebAuthn virtual authenticators, which chromedriver keeps per tab); every cookie of every host (cookies
    are per host, not per port: a page on another port of 127.0.0.1 or localhost would see them) and the HTTP cache
    cleared; each origin the closed tabs had visited (their navigation histories) cleared of localStorage,
    IndexedDB, Cache Storage and service workers; the timeouts start_phone leaves. A new tab gets the phone's
    390×844 emulation from chromedriver, as the first one did. Raises (a WebDriverException, or the connection's
    error) when the driver is dead."""
    import urllib.parse

    origins = set()
    tabs = driver.window_handles
    for tab in tabs:
        driver.switch_to.window(tab)
        for entry in driver.execute_cdp_cmd("Page.getNavigationHistory", {})["entries"]:
            url = urllib.parse.urlsplit(entry["url"])
            if url.scheme in ("http", "https"):
                origins.add(f"{url.scheme}://{url.netloc}")
    driver.switch_to.new_window("tab")
    blank = driver.current_window_handle
    for tab in tabs:
        driver.switch_to.window(tab)
        driver.close()
    driver.switch_to.window(blank)
    driver._authenticator_id = None  # selenium's note of the last one added: it went with its tab
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    for origin in sorted(origins):
        driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "all"})
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    driver.implicitly_wait(0)


class SharedPhone:
    """The one phone (one chromedriver session, one Chromium) of a pytest worker: started by the first test that asks
    for it, wiped after each test (release) and handed to the next only when that wipe was done and the browser still
    answers (clean wipes it otherwise), replaced by a new one when a test left it dead (the driver quit, chromedriver
    or Chromium gone), quit when the session ends. `starts` counts the browsers started; `wiped_since_use` says the
    browser was wiped after its last test."""

    def __init__(self, folder: str):
        self.folder = folder
        self.driver = None
        self.starts = 0
        self.wiped_since_use = False

    def clean(self):
        """The phone for a test, clean: this worker's browser (wiped now unless it was after its last test), or a new
        one when there is none or it is dead."""
        if self.driver is not None and not (self.wiped_since_use and self.answers()) and not self.wiped():
            self.quit()
        if self.driver is None:
            self.starts += 1
            folder = os.path.join(self.folder, f"browser-{self.starts}")
            os.makedirs(folder)
            self.driver = start_phone(folder)
        self.wiped_since_use = False
        return self.driver

    def release(self) -> None:
        """After a test: the browser wiped at once (its pages' connections closed), or quit when it is dead."""
        self.wiped_since_use = self.driver is not None and self.wiped()
        if not self.wiped_since_use:
            self.quit()

    def answers(self) -> bool:
        """The browser answers, with the one tab a wipe leaves."""
        import urllib3
        from selenium.common.exceptions import WebDriverException

        try:
            return len(self.driver.window_handles) == 1
        except (WebDriverException, urllib3.exceptions.HTTPError, OSError):
            return False

    def wiped(self) -> bool:
        """Wipe the browser: True once done, False when the driver is dead (it is then of no use to anyone)."""
        import urllib3
        from selenium.common.exceptions import WebDriverException

        try:
            wipe_phone(self.driver)
        except (WebDriverException, urllib3.exceptions.HTTPError, OSError):
            return False
        return True

    def quit(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None:
            with contextlib.suppress(Exception):  # quitting a dead session: chromedriver ends Chromium all the same
                driver.quit()


@pytest.fixture(scope="session")
def shared_phone():
    """This worker's SharedPhone; its browser, if one was started, quit at the session's end, passed or failed."""
    import tempfile

    browser = SharedPhone(tempfile.mkdtemp(prefix="durable-job-tests-chromium-"))
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(browser.folder, ignore_errors=True)


@pytest.fixture
def phone(shared_phone):
    """A reviewer's phone: real Chromium through chromedriver at 390×844, as a Selenium driver.

    Shared: one browser per pytest worker, started lazily by the first test that asks for it and quit when the session
    ends (starting one costs about 1 s of CPU and 2 s of wall time here; a wipe about a quarter of that).
    Isolated: the browser is wiped after each test (wipe_phone: one blank tab; every cookie of every host, storage,
    cache, service workers, virtual authenticators, device-metrics overrides and timeouts back as a new phone has
    them), and again before a test unless that wipe was done and the browser still answers, so no test sees what
    another left; a test that leaves it dead (quit, crashed) gets the next test a new one. Name this fixture after
    `serving` and `other_page`: it is then wiped before they stop their servers, closing its pages' connections
    first, as quitting the browser in the test did."""
    driver = shared_phone.clean()
    yield driver
    shared_phone.release()


def kill_group(proc: subprocess.Popen, sig=signal.SIGKILL) -> None:
    """Signal the whole process group `proc` leads (Workspace.popen starts one): the command and every
    process it started (an MCP server, say); then reap it."""
    try:
        leads_group = os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:
        leads_group = True  # already gone (and reaped): its group may still hold children
    try:
        if leads_group:
            os.killpg(proc.pid, sig)
        else:  # started without its own group: signalling the group would hit the test runner itself
            os.kill(proc.pid, sig)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def hold_in_another_process(code: str) -> subprocess.Popen:
    """Run code (which prints 'locked' once it holds its lock) in another interpreter until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code + "print('locked', flush=True)\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def hold_run_lock(state_dir) -> subprocess.Popen:
    """Another process holding run.lock (flock, as a running durable_job command does) until its stdin closes."""
    return hold_in_another_process(
        "import fcntl, os, sys\n"
        f"fd = os.open({os.path.join(str(state_dir), 'run.lock')!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "os.ftruncate(fd, 0); os.write(fd, f'{os.getpid()} decide\\n'.encode())\n"
    )


def hold_sqlite_lock(path) -> subprocess.Popen:
    """Another process holding BEGIN EXCLUSIVE on path until its stdin closes."""
    return hold_in_another_process(
        f"import sqlite3, sys\nc = sqlite3.connect({path!r}, isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\n"
    )


def wait_for(predicate, timeout=20.0, interval=0.01):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def posted_at_once(client, path: str, data: dict, times: int) -> list:
    """The same form posted `times` times at once from one signed-in client (a double tap, a phone that sends again);
    each answer, in the order they came back."""
    answers: list = []
    posts = [threading.Thread(target=lambda: answers.append(client.post(path, data=data))) for _ in range(times)]
    for post in posts:
        post.start()
    for post in posts:
        post.join()
    return answers


def copy_house(root) -> str:
    """A copy of the program and its extensions (durable_job.py and durable_job_team/), as a release is laid out; its durable_job.py."""
    os.makedirs(root, exist_ok=True)
    shutil.copy(PROGRAM, os.path.join(str(root), "durable_job.py"))
    team = os.path.join(REPO, "durable_job_team")
    shutil.copytree(team, os.path.join(str(root), "durable_job_team"), ignore=shutil.ignore_patterns("__pycache__"))
    return os.path.join(str(root), "durable_job.py")


def copy_program(root, transform=None) -> str:
    """A copy of durable_job.py (optionally edited) to run as a changed program."""
    path = os.path.join(str(root), "durable_job.py")
    with open(PROGRAM, encoding="utf-8") as fh:
        text = fh.read()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(transform(text) if transform else text)
    return path


__all__ = [
    "ALPHA",
    "BETA",
    "BOTH",
    "ENGINE_MARK",
    "FAKE_KEY",
    "GAMMA",
    "PROGRAM",
    "REPO",
    "TESTS",
    "Ledger",
    "Provider",
    "Result",
    "Workspace",
    "allowed_signers",
    "assert_held",
    "canonical",
    "clean_env",
    "copy_house",
    "copy_program",
    "engine_digest",
    "file_bytes",
    "free_port",
    "hold_run_lock",
    "hold_sqlite_lock",
    "in_the_engine",
    "kill_group",
    "make_key",
    "new_store",
    "openai_workspace",
    "past_the_engine",
    "paste",
    "posted_at_once",
    "program_sha256",
    "read_marks",
    "run_inprocess",
    "sha256",
    "shutil",
    "store_rows",
    "wait_for",
    "wal_since",
]
