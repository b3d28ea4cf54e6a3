#!/usr/bin/env python3
"""The floor benchmark (`make bench`): this program beside bare LangGraph and DBOS on the same 3-item job.

The least durable work a model call can cost is two commits, pending before the request and completed after.
This measures, in one run, what this program costs a 3-item `mode: openai` job against its peers, each sending
the same request bodies to the same loopback server (bench/floor_provider.py: tests/provider_server.py's
answers, a valid proposal for each item, so this program's job reaches its review):

* this program on a new state directory each job, and on a PostgreSQL store (its administrator's role, migrated
  once, untimed), through its command API: `dj.start(store, manifest)` on a store opened once for the child's jobs (its
  connections reused, as a worker's are), or on a state directory opened for each job (bench/floor_dj.py);
* bare LangGraph, a 3-node graph with SqliteSaver (a new file each job) and PostgresSaver (bench/floor_langgraph.py);
* DBOS Transact 3.4.x, a workflow of three steps and an event, its system database in SQLite and in PostgreSQL
  (bench/floor_dbos.py), installed by this script into a throwaway virtual environment of its own
  (bench/.peers-venv, made again when the pins change; the product does not depend on DBOS). Without a package
  index DBOS cannot be installed: its rows are then skipped, and the run says so.

Every PostgreSQL contender uses its own database on one throwaway server run with fsync on.

How it is measured:

* Each contender is a child process of its own (its imports and one-time set-up excluded; the fsync floor's
  LD_PRELOAD applies to it); one warm-up job, then --rounds timed jobs (default 30), the contenders taking turns
  round by round (each round in a shuffled order); the figure is the median of the in-process wall time of a job
  (bench/floor_child.py times it around the job alone; cpu ms is the process's CPU time over the same span).
* The fsync floor: bench/fsync_floor.c, compiled with gcc at run time into the temporary folder, is an LD_PRELOAD
  library whose fsync and fdatasync call the real ones and then sleep until at least --floor-ms (default 2 ms)
  have passed since the call began. It is loaded by every contender and by the PostgreSQL server, so a ratio
  measures the programs and not the shared machine's disk (whose fdatasync costs from 0.1 ms to 2.4 ms here
  depending on the neighbours). --no-floor leaves it out (and then the server still runs with fsync on).
* Commits and fsyncs of one job, from a separate child of each contender (after the timed rounds, alone on the
  machine): it runs a warm-up job, then the counted job between two marker writes to /dev/null, all under
  `strace -f -x -y -e trace=fsync,fdatasync,pwrite64,write,unlink,unlinkat,ftruncate,link,linkat,rename,renameat,renameat2`.
  Within the markers:
  - fsyncs (client): every fsync and fdatasync call, any thread;
  - SQLite commits: WAL commit frames (a 24-byte frame header written to a `-wal` file whose "database size after
    commit" field is not zero: only a transaction's last frame carries it) plus rollback-journal commits (a
    `-journal` file deleted, or truncated to 0 bytes), plus a database file linked or renamed into place (a new
    state directory's journal is made whole in a private file and linked to its name: one durable step, counted as
    one commit); DBOS's SQLite keeps the rollback journal;
  - PostgreSQL commits: COMMIT (and ABORT) records that `pg_waldump` finds in the WAL between
    pg_current_wal_insert_lsn() read just before and just after the job (a CHECKPOINT first, so each counted job
    starts alike): every transaction that wrote, counted once, whichever connection ran it. (pg_stat_database's
    xact_commit would also count read-only transactions, which cost no WAL flush.)
  - fsyncs (server): `strace -f -c -e trace=fsync,fdatasync` attached to every process of the server (the
    postmaster followed into the backends it forks) for the length of the job.
* A whole job as a process: `python durable_job.py start --manifest M --state-dir NEW --json`, start-up included,
  wall time until it exits at the review, median of --process-runs (default 7); with --before REV the program
  as it was at REV (`git archive REV durable_job.py durable_job_team`, in a temporary folder) is measured in the
  same run, alternating, as a process and in-process on a state directory and on a store (a database of its own,
  migrated by that program).

What differs between the contenders besides their durability (so a reader can weigh the ratios):

* the peers make one openai client for their process, as such a program would; this program makes one a call (one
  request a client, redirects off: its connect-phase guarantee), and that is part of what it costs. The loopback
  server speaks HTTP/1.0, so every request of every contender opens its own connection;
* DBOS's step commits after its call returns (a crash during a call sends it again), LangGraph's graph journals no
  call at all and has no review node: neither gives this program's pending-before-request guarantee;
* DBOS's SQLite system database is one file for the process's jobs (DBOS.launch() once); the other SQLite contenders
  start each job on a new file or directory, so their set-up is in every job's figure.

The counting was checked against the whole process: `strace -f -c -e trace=fsync,fdatasync` of one
`python durable_job.py start` on a new state directory counts the same fsyncs (68 at 7a8ab36) as the marked window.

Targets (the floor issue; a MISS is reported, not failed: exit 0 unless --strict):

* commits of one whole 3-item start to the review, set-up included, on a new state directory <= 19; on a store <= 16
* fsyncs of that job on a state directory <= 24
* in-process time a job <= 1.0x DBOS's on the same backend (SQLite; PostgreSQL on the same server); on PostgreSQL
  also issue 46's target, <= 1.25x (issue 32's closing note proposed 1.5x): bare LangGraph with PostgresSaver is
  already about 0.7x DBOS, and a store job waits for the disk as often as DBOS does (six synchronous commits, each
  call's pending and completed: a start's seal goes to the disk with the first pending row), so what remains over
  DBOS is about 8 ms of Python CPU a job (the journal's rows, links and events, validation, the seal, a client a
  call and its deadline's thread, LangGraph's checkpoints in the saver's threads) and 22 round trips to the server
  (libpq's trace: before the run, the job's row read, the seal's rights, the seal, the lock; each call's read,
  pending and completed; the saver's six writes (a new thread's first read answered without one); the review's
  draft read and the answer's one read; the lock's end), 32 at 701139f; tests/test_store.py counts them (2 items).
  Measured on 2026-12-06 (py-spy of the thread holding the GIL, an in-process store job on the store opened once,
  about 20 ms of it): psycopg's work for the journal, seal, lock and reads 4.7 ms and for the checkpoints 3.1 ms
  (its pipeline sends and polls once a statement, about 30-60 us each, and a job sends about 100 statements: each
  transaction's lock check, row, event and two or three links, one statement each; LangGraph's saver a statement a
  write), the openai SDK 4.5 ms (the peers' too), the journal's rows, links and events in Python 2.4, LangGraph 1.5,
  threads 1.0 (LangGraph's pool a run, a deadline's thread a call), a client a call 0.6, validation 0.5, the seal and
  lock 0.4; no part but psycopg's is over 0.7 ms. A round trip removed saves 0.3-0.5 ms (the seal's rights and the
  review's draft read skipped, in a throwaway build: 0.6 ms the median). The server's seventh fsync is the WAL
  writer's, at its 200 ms tick, flushing the seal's asynchronous commit: it ends before the first pending commit
  begins, off the job's path. So 1.25x needs 3-5 ms less a job (49-51 ms against DBOS's 37-39 in that day's
  runs), which no cut of a read or a round trip reaches: it needs about half the statements gone (each transaction sent as one call of a server function that
  writes its rows, links and events, which the policies and triggers must then be shown to hold for as today), or
  one openai client for the process (what the connect-phase guarantee makes a call each). Issue 46's closing note
  proposes 1.4x, which the run checks beside it
* a whole job as a process no slower than --before REV's (median wall-time ratio <= 1.0x; only with --before; the
  CPU and minimum ratios beside it are steadier when other work shares the machine, which the run notes from the
  load average)

Everything happens in a new temporary folder (--keep keeps it); the programs measured are copies, so a concurrent
edit of the checkout cannot break a run half-way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import three_items  # bench/, beside this script

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
TESTS = os.path.join(REPO, "tests")
DBOS_SPEC = "dbos==3.4.*"
PEERS_VENV = os.path.join(BENCH, ".peers-venv")

SOURCES = three_items.SOURCES

STRACE_CALLS = "fsync,fdatasync,pwrite64,write,unlink,unlinkat,ftruncate,link,linkat,rename,renameat,renameat2"
MARK_BEGIN, MARK_END = "FLOOR-COUNT-BEGIN", "FLOOR-COUNT-END"

TARGET_DIR_COMMITS = 19
TARGET_STORE_COMMITS = 16
TARGET_DIR_FSYNCS = 24
TARGET_VS_DBOS = 1.0
TARGET_VS_DBOS_STORE = 1.25  # issue 46's target for a store, what stands in its way (see the docstring)
PROPOSED_VS_DBOS_STORE = 1.4  # the nearest target issue 46's closing note proposes, from what the docstring measures
TARGET_PROCESS = 1.0


class BenchError(Exception):
    """Something the bench needs failed, so there is no figure."""


def progress(text: str) -> None:
    print(f"floor: {text}", file=sys.stderr, flush=True)


def table(headers: list, rows: list, right: set) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


# -- the fsync floor -----------------------------------------------------------


def build_floor(root: str) -> str:
    """bench/fsync_floor.c compiled into root/floor/fsync_floor.so (readable by the postgres user)."""
    folder = os.path.join(root, "floor")
    os.makedirs(folder)
    os.chmod(folder, 0o755)
    out = os.path.join(folder, "fsync_floor.so")
    proc = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", out, os.path.join(BENCH, "fsync_floor.c"), "-ldl"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise BenchError(f"gcc could not build the fsync floor: {proc.stderr.strip()[-600:]}")
    os.chmod(out, 0o755)
    return out


# -- the programs, the job, the provider -----------------------------------------


def program_copy(root: str, name: str, rev: str | None) -> str:
    """A folder holding durable_job.py and durable_job_team: this checkout's (rev None) or git revision rev's."""
    folder = os.path.join(root, name)
    os.makedirs(folder)
    if rev is None:
        shutil.copy2(os.path.join(REPO, "durable_job.py"), folder)
        shutil.copytree(os.path.join(REPO, "durable_job_team"), os.path.join(folder, "durable_job_team"))
        return folder
    paths = [p for p in ("durable_job.py", "durable_job_team") if git_has(rev, p)]
    if "durable_job.py" not in paths:
        raise SystemExit(f"floor: --before {rev}: no durable_job.py at that revision")
    archive = subprocess.run(["git", "archive", "--format=tar", rev, *paths], cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"floor: --before {rev}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    return folder


def git_has(rev: str, path: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{rev}:{path}"], cwd=REPO, capture_output=True).returncode == 0


def write_job(root: str) -> str:
    """The 3 sources and the base manifest (mode openai, one call at a time) in root/job; returns the manifest's path."""
    return three_items.write_manifest(os.path.join(root, "job"), "manifest.json", "floor")


def start_provider(root: str) -> tuple[subprocess.Popen, str, str]:
    folder = os.path.join(root, "provider")
    os.makedirs(folder)
    log = os.path.join(folder, "requests.jsonl")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(BENCH, "floor_provider.py"), "--log", log],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=open(os.path.join(folder, "stderr.txt"), "w"),
        text=True,
        env=base_env(),
    )
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise BenchError(f"the loopback provider did not start (said {line!r})")
    return proc, line.split(" ", 1)[1], log


def capture_bodies(log: str, root: str) -> str:
    """The request bodies of the first job in the provider's log (this program's), for the peers to send."""
    with open(log, encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    bodies = [r["body"] for r in records[:3]]
    item_ids = []
    for body in bodies:
        text = body.get("input") if isinstance(body.get("input"), str) else json.dumps(body.get("input"))
        found = re.search(r"^Item: (\S+)$", text, re.M)
        item_ids.append(found.group(1) if found else None)
    if item_ids != list(SOURCES):
        raise BenchError(f"the provider's log does not start with this program's 3 calls (items {item_ids})")
    path = os.path.join(root, "job", "bodies.json")
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"bodies": bodies, "itemIds": item_ids}, fh, indent=1)
    return path


# -- PostgreSQL, with fsync on and the floor -------------------------------------


def start_pg(root: str, floor_env: dict):
    """A throwaway server (tests/pg_server.py), then restarted with fsync on and the floor's LD_PRELOAD."""
    sys.path.insert(0, TESTS)
    from pg_server import PgServer

    server = PgServer.start(os.path.join(root, "pg"))
    server.stop()
    server.opts += " -c fsync=on -c synchronous_commit=on -c full_page_writes=on"
    saved = {k: os.environ.get(k) for k in floor_env}
    os.environ.update(floor_env)
    try:
        server.start_again()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if server.sql("postgres", "SHOW fsync", db="postgres").strip() != "on":
        raise BenchError("the PostgreSQL server did not start with fsync on")
    return server


def postmaster_pid(server) -> int:
    with open(os.path.join(server.data, "postmaster.pid")) as fh:
        return int(fh.readline())


def server_pids(server) -> list[int]:
    """The postmaster and every process it started."""
    main = postmaster_pid(server)
    pids = [main]
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == main:
                        pids.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def maps_floor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return "fsync_floor" in fh.read()
    except OSError:
        return False


# -- DBOS's own environment ------------------------------------------------------


def openai_pin() -> str:
    with open(os.path.join(REPO, "requirements.txt")) as fh:
        for line in fh:
            if line.strip().lower().startswith("openai=="):
                return line.strip()
    raise BenchError("requirements.txt pins no openai version")


def peers_python(venv: str) -> tuple[str | None, str]:
    """DBOS's interpreter in venv (made, or made again when the pins changed), or None and the reason."""
    spec = f"{DBOS_SPEC} {openai_pin()}"
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".floor-pins")
    try:
        with open(marker) as fh:
            if fh.read() == spec and os.path.exists(python):
                return python, spec
    except OSError:
        pass
    progress(f"installing {spec} into {venv} (a throwaway environment for the peer; the product does not depend on it)")
    shutil.rmtree(venv, ignore_errors=True)
    made = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
    if made.returncode != 0:
        return None, f"python -m venv failed: {made.stderr.strip()[-400:]}"
    try:
        pip = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *spec.split()],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(venv, ignore_errors=True)
        return None, "pip did not finish installing it within 15 minutes (no package index reachable?)"
    if pip.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        tail = [ln for ln in pip.stderr.strip().splitlines() if not ln.startswith("WARNING")][-4:]
        return None, "pip could not install it (no package index reachable?): " + " | ".join(tail)
    with open(marker, "w") as fh:
        fh.write(spec)
    return python, spec


# -- the children ------------------------------------------------------------------


def base_env(**extra) -> dict:
    """This machine's environment without provider, program, preload or Python path settings."""
    drop = ("OPENAI_", "DURABLE_JOB_", "LD_PRELOAD", "FSYNC_FLOOR_", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


class Child:
    """One contender process speaking bench/floor_child.py's protocol (optionally under strace)."""

    def __init__(self, argv: list, env: dict, log: str, label: str, strace_out: str | None = None):
        self.label = label
        self.log = log
        if strace_out:
            argv = ["strace", "-f", "-x", "-y", "-s", "32", "-e", f"trace={STRACE_CALLS}", "-o", strace_out, *argv]
        with open(log, "a") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, text=True, bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()
        self.info = self.reply(600)
        if not self.info.get("ready"):
            raise BenchError(f"{label}: did not start: {self.info}")

    def read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def reply(self, timeout: float) -> dict:
        """The child's next JSON line (a line a library printed before the protocol took stdout is skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if not line:
                self.proc.kill()
                raise BenchError(f"{self.label}: no answer (exit {self.proc.wait()}); its stderr:\n{self.tail()}")
            if line.startswith("{"):
                return json.loads(line)

    def tail(self) -> str:
        try:
            with open(self.log, errors="replace") as fh:
                return fh.read()[-2500:]
        except OSError:
            return "(none)"

    def job(self, n: int, cmd: str = "job") -> dict:
        self.proc.stdin.write(json.dumps({"cmd": cmd, "n": n}) + "\n")
        self.proc.stdin.flush()
        out = self.reply(300)
        if out.get("error") or out.get("problem"):
            raise BenchError(f"{self.label}: job {n} failed: {out.get('error') or out.get('problem')}")
        return out

    def quit(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Contender:
    """What is measured: its name, backend and how to start its child."""

    def __init__(self, key: str, name: str, backend: str, argv: list, env: dict, root: str, server=None):
        self.key, self.name, self.backend = key, name, backend
        self.argv, self.env, self.root = argv, env, root
        self.server = server
        self.ms: list[float] = []
        self.cpu: list[float] = []
        self.counts: dict = {}
        self.version = "?"
        self.program: str | None = None  # "now" or "before": which copy of this program it imports
        self.starts = 0

    def start(self, strace_out: str | None = None) -> Child:
        self.starts += 1
        folder = os.path.join(self.root, f"{self.key}-{self.starts}")
        os.makedirs(folder)
        argv = [a.replace("{folder}", folder) for a in self.argv]
        return Child(argv, self.env, os.path.join(self.root, f"{self.key}.stderr.txt"), self.name, strace_out)


# -- counting one job ----------------------------------------------------------------


def strace_string(text: str) -> bytes:
    """The bytes of a string as strace prints it (\\xHH, C escapes, octal, or the character itself)."""
    out, n = bytearray(), 0
    simple = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, '"': 34, "\\": 92}
    while n < len(text):
        ch = text[n]
        if ch != "\\":
            out += ch.encode("latin-1", "replace")
            n += 1
        elif text[n + 1] == "x":
            out.append(int(text[n + 2 : n + 4], 16))
            n += 4
        elif text[n + 1] in simple:
            out.append(simple[text[n + 1]])
            n += 2
        else:
            digits = re.match(r"[0-7]{1,3}", text[n + 1 :]).group()
            out.append(int(digits, 8))
            n += 1 + len(digits)
    return bytes(out)


WAL_FRAME = re.compile(r'^\d+\s+pwrite64\(\d+<([^>]*-wal)>, "((?:[^"\\]|\\.)*)"(?:\.\.\.)?, (\d+), (\d+)\)')
JOURNAL_UNLINK = re.compile(r'^\d+\s+unlink(?:at)?\((?:[^,"]*, )?"([^"]*-journal)"[^)]*\)\s+=\s+0\b')
JOURNAL_TRUNCATE = re.compile(r"^\d+\s+ftruncate\(\d+<([^>]*-journal)>, 0\)\s+=\s+0\b")
PLACED = re.compile(r'^\d+\s+(?:link|linkat|rename|renameat2?)\(.*"([^"]*\.sqlite)"[^"]*\)\s+=\s+0\b')
FSYNC = re.compile(r"^\d+\s+(fsync|fdatasync)\(")
UNFINISHED = re.compile(r"^(\d+)\s+(.*) <unfinished \.\.\.>$")
RESUMED = re.compile(r"^(\d+)\s+<\.\.\. \w+ resumed>(.*)$")


def strace_window(path: str) -> dict:
    """Commits and fsyncs between the child's two markers in an strace -f -x -y output."""
    pending: dict[str, str] = {}
    inside = seen = False
    counts = {"fsyncs": 0, "wal_commits": 0, "journal_commits": 0, "placed_commits": 0}
    with open(path, errors="replace") as fh:
        for raw in fh:
            raw = raw.rstrip("\n")
            unfinished = UNFINISHED.match(raw)
            if unfinished:
                pending[unfinished.group(1)] = f"{unfinished.group(1)} {unfinished.group(2)}"
                continue
            resumed = RESUMED.match(raw)
            line = pending.pop(resumed.group(1), resumed.group(1) + " ?(") + resumed.group(2) if resumed else raw
            if MARK_BEGIN in line and "write(" in line:
                inside = seen = True
                continue
            if MARK_END in line and "write(" in line:
                inside = False
                continue
            if not inside:
                continue
            if FSYNC.match(line):
                counts["fsyncs"] += 1
            frame = WAL_FRAME.match(line)
            if frame and int(frame.group(3)) == 24:
                header = strace_string(frame.group(2))
                if len(header) >= 8 and header[4:8] != b"\0\0\0\0":
                    counts["wal_commits"] += 1
            if JOURNAL_UNLINK.match(line) or JOURNAL_TRUNCATE.match(line):
                counts["journal_commits"] += 1
            if PLACED.match(line):
                counts["placed_commits"] += 1
    if not seen:
        raise BenchError(f"no count markers in {path}")
    counts["commits"] = counts["wal_commits"] + counts["journal_commits"] + counts["placed_commits"]
    return counts


class ServerTrace:
    """strace -f -c -e trace=fsync,fdatasync attached to every process of the server, for the length of a job."""

    def __init__(self, server, out: str):
        pids = server_pids(server)
        argv = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", out]
        for pid in pids:
            argv += ["-p", str(pid)]
        self.out = out
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.attached = threading.Semaphore(0)
        self.lines: list[str] = []
        threading.Thread(target=self.read, daemon=True).start()
        deadline = time.monotonic() + 30
        for _ in pids:
            if not self.attached.acquire(timeout=max(0.1, deadline - time.monotonic())):
                self.proc.kill()
                raise BenchError(f"strace could not attach to the server: {self.lines[-5:]}")

    def read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.strip())
            if "attached" in line or "No such process" in line:  # a backend that exited after the listing: nothing to trace
                self.attached.release()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)
        calls = 0
        with open(self.out, errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if parts and parts[-1] in ("fsync", "fdatasync") and len(parts) >= 5:
                    calls += int(parts[3])
        return calls


def wal_lsn(server) -> str:
    return server.sql("postgres", "SELECT pg_current_wal_insert_lsn()", db="postgres").strip()


def wal_commits(server, start: str, end: str) -> tuple[int, int]:
    """COMMIT and ABORT records in the server's WAL between two LSNs (pg_waldump)."""
    sys.path.insert(0, TESTS)
    from pg_server import pg_bin

    if start == end:
        return 0, 0
    proc = subprocess.run(
        [pg_bin("pg_waldump"), "-p", os.path.join(server.data, "pg_wal"), "-s", start, "-e", end, "-r", "Transaction"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and "desc:" not in proc.stdout:
        raise BenchError(f"pg_waldump failed: {proc.stderr.strip()[-400:]}")
    commits = sum(1 for line in proc.stdout.splitlines() if re.search(r"desc: COMMIT\b", line))
    aborts = sum(1 for line in proc.stdout.splitlines() if re.search(r"desc: ABORT\b", line))
    return commits, aborts


def count_one_job(contender: Contender, root: str) -> dict:
    """A new child of the contender under strace: a warm-up job, then one job counted between the markers."""
    out = os.path.join(root, "counts", f"{contender.key}.strace")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    child = contender.start(strace_out=out)
    try:
        child.job(0)
        trace = None
        if contender.server is not None:
            contender.server.sql("postgres", "CHECKPOINT", db="postgres")
            before = wal_lsn(contender.server)
            trace = ServerTrace(contender.server, out + ".server")
        child.job(1, "count")
        counts: dict = {}
        if trace is not None:
            counts["server_fsyncs"] = trace.stop()
            counts["pg_commits"], counts["pg_aborts"] = wal_commits(contender.server, before, wal_lsn(contender.server))
    finally:
        child.quit()
    counts.update(strace_window(out))
    if contender.server is not None:
        counts["commits"] = counts["pg_commits"] + counts["commits"]
    return counts


# -- a whole job as a process ----------------------------------------------------------


def process_job(program: str, manifest: str, root: str, env: dict, label: str) -> tuple[float, float]:
    """`python durable_job.py start` to the review on a new state directory: (wall ms, the child's own CPU ms)."""
    state = tempfile.mkdtemp(prefix="state-", dir=root)
    os.rmdir(state)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        began = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, program, "start", "--manifest", manifest, "--state-dir", state, "--json"],
            cwd=os.path.dirname(manifest),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        ms = (time.perf_counter() - began) * 1000
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise BenchError(f"{label}: start exited {proc.returncode}: {stderr.strip()[-800:]}")
    doc = json.loads(stdout)
    if not doc.get("interrupt") or [r["status"] for r in doc["results"]] != ["validated"] * len(SOURCES):
        raise BenchError(f"{label}: not at review with every item validated: {stdout[:400]}")
    return ms, (usage.ru_utime + usage.ru_stime) * 1000


# -- the run ------------------------------------------------------------------------------


def median(values: list) -> float:
    return statistics.median(values) if values else float("nan")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="timed jobs of each contender, after one warm-up (default 30)")
    parser.add_argument("--process-runs", type=int, default=7, help="runs of the whole job as a process (default 7)")
    parser.add_argument("--floor-ms", type=float, default=2.0, help="the fsync floor in milliseconds (default 2)")
    parser.add_argument("--no-floor", action="store_true", help="no fsync floor (the disk as it is)")
    parser.add_argument("--before", metavar="REV", help="also measure the program as it was at git revision REV, in the same run")
    parser.add_argument("--skip-dbos", action="store_true", help="leave DBOS out (no throwaway environment)")
    parser.add_argument("--skip-counts", action="store_true", help="no strace counts of commits and fsyncs")
    parser.add_argument("--peers-venv", default=PEERS_VENV, help=f"DBOS's throwaway environment (default {PEERS_VENV})")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and print its path")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.process_runs < 1:
        parser.error("--rounds and --process-runs must be at least 1")
    args.notes = []
    if not args.no_floor and not shutil.which("gcc"):
        args.no_floor = True
        args.notes.append("gcc is not installed (apt-get install -y gcc), so the fsync floor could not be built: run without it")
    if not args.skip_counts and not shutil.which("strace"):
        args.skip_counts = True
        args.notes.append("strace is not installed (apt-get install -y strace), so no commits or fsyncs were counted")
    for note in args.notes:
        progress(note)
    return args


class Floor:
    """One run: the floor, the provider, the server, the programs' copies, the contenders and their children."""

    def __init__(self, args, root: str):
        self.args, self.root = args, root
        self.provider = self.server = None
        self.children: dict[str, Child] = {}
        self.contenders: list[Contender] = []
        self.process: dict[str, list] = {}

    def set_up(self) -> None:
        args, root = self.args, self.root
        if args.skip_dbos:
            self.dbos_python, self.dbos_note = None, "left out (--skip-dbos)"
        else:
            self.dbos_python, self.dbos_note = peers_python(os.path.abspath(args.peers_venv))
        if self.dbos_python is None:
            progress(f"DBOS: {self.dbos_note}; its rows are skipped")
        self.floor_env = {} if args.no_floor else {"LD_PRELOAD": build_floor(root), "FSYNC_FLOOR_MS": str(args.floor_ms)}
        self.provider, base_url, self.log = start_provider(root)
        progress("starting a throwaway PostgreSQL server (fsync on" + (", the floor preloaded)" if self.floor_env else ")"))
        self.server = start_pg(root, self.floor_env)
        self.server_floor = maps_floor(postmaster_pid(self.server))
        self.manifest = write_job(root)
        # a dummy key, made for this run and kept in the children's environment only (the loopback server checks none)
        self.env = base_env(OPENAI_API_KEY="sk-floor-dummy-" + secrets.token_hex(6), OPENAI_BASE_URL=base_url, **self.floor_env)
        self.programs = {"now": program_copy(root, "program", None)}
        if args.before:
            self.programs["before"] = program_copy(root, "program-before", args.before)
        self.children_root = os.path.join(root, "children")
        os.makedirs(self.children_root)

    def contender(self, key: str, name: str, backend: str, argv: list, program: str | None = None, server: bool = False) -> Contender:
        env = {**self.env, "PYTHONPATH": self.programs[program]} if program else self.env
        c = Contender(key, name, backend, argv, env, self.children_root, self.server if server else None)
        c.program = program
        self.contenders.append(c)
        return c

    def migrated_store(self, name: str, program: str) -> str:
        """A new database of the run's server, set up (untimed) by that copy of this program's migrate; its URL."""
        url = self.server.new_database(name)
        migrate = subprocess.run(
            [sys.executable, os.path.join(self.programs[program], "durable_job.py"), "migrate", "--store", url, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
        )
        if migrate.returncode != 0:
            raise BenchError(f"migrate of the store ({program}) failed: {migrate.stderr.strip()[-600:]}")
        return url

    def make_contenders(self) -> None:
        py, dj, before = sys.executable, os.path.join(BENCH, "floor_dj.py"), self.args.before
        dir_argv = [py, dj, "--kind", "dir", "--manifest", self.manifest, "--root", "{folder}"]
        first = self.contender("dj-dir", "this program, state dir", "SQLite", dir_argv, "now")
        # The warm-up job of this program's state-directory child: its requests are the bodies the peers send.
        self.children[first.key] = first.start()
        self.children[first.key].job(0)
        bodies = capture_bodies(self.log, self.root)
        has_api = False
        if before:
            with open(os.path.join(self.programs["before"], "durable_job.py"), encoding="utf-8") as fh:
                has_api = "def open_store(" in fh.read()
            if has_api:
                self.contender("dj-dir-before", f"this program @{before}, state dir", "SQLite", dir_argv, "before")
            else:
                progress(f"--before {before}: that program has no command API; measured as a process only")
        url = self.migrated_store("floor_dj", "now")
        store_argv = [py, dj, "--kind", "store", "--manifest", self.manifest, "--root", "{folder}", "--store", url]
        self.contender("dj-store", "this program, store", "PostgreSQL", store_argv, "now", server=True)
        if before and has_api:  # the program at REV on a store of its own, migrated by that program
            old_url = self.migrated_store("floor_dj_before", "before")
            old_argv = [*store_argv[:-1], old_url]
            self.contender("dj-store-before", f"this program @{before}, store", "PostgreSQL", old_argv, "before", server=True)
        lg = os.path.join(BENCH, "floor_langgraph.py")
        lg_sqlite = [py, lg, "--kind", "sqlite", "--bodies", bodies, "--root", "{folder}"]
        self.contender("lg-sqlite", "LangGraph + SqliteSaver", "SQLite", lg_sqlite)
        lg_pg = [py, lg, "--kind", "postgres", "--bodies", bodies, "--store", self.server.new_database("floor_langgraph")]
        self.contender("lg-pg", "LangGraph + PostgresSaver", "PostgreSQL", lg_pg, server=True)
        if self.dbos_python:
            dbos = [self.dbos_python, os.path.join(BENCH, "floor_dbos.py"), "--bodies", bodies, "--system-database"]
            self.contender("dbos-sqlite", "DBOS, SQLite", "SQLite", [*dbos, "sqlite:///{folder}/dbos.sqlite"])
            self.contender("dbos-pg", "DBOS, PostgreSQL", "PostgreSQL", [*dbos, self.server.new_database("floor_dbos")], server=True)

    def start_children(self) -> None:
        """Every contender's child started, its warm-up job run, and what it loaded checked."""
        for c in self.contenders:
            if c.key not in self.children:
                progress(f"starting {c.name}")
                self.children[c.key] = c.start()
                self.children[c.key].job(0)
            info = self.children[c.key].info
            c.version = info.get("version", "?")
            if c.program:
                folder = self.programs[c.program]
                if not os.path.abspath(info["program"]).startswith(folder + os.sep):
                    raise BenchError(f"{c.name} imported {info['program']}, not the copy in {folder}")
                c.version = f"durable_job {c.version} " + (f"@{self.args.before}" if c.program == "before" else "(this checkout)")
            if self.floor_env and not info.get("floor"):
                raise BenchError(f"{c.name}: the fsync floor is not loaded in its process")

    def rounds(self) -> None:
        """--rounds timed jobs of each contender, one each a round, in an order shuffled every round (seeded by the
        round's number, so a run is repeatable). Not rotated: a rotation keeps each contender behind the same one, and
        a store job run right after another store job finds the server warm (the same program behind a state-directory
        job measured 1.5 ms slower a store job than its copy behind a store job: --before HEAD, 30 rounds)."""
        progress(f"{self.args.rounds} rounds of {len(self.contenders)} contenders (warm-up done)")
        for r in range(self.args.rounds):
            for c in random.Random(r).sample(self.contenders, len(self.contenders)):
                out = self.children[c.key].job(r + 1)
                c.ms.append(out["ms"])
                c.cpu.append(out["cpu_ms"])
            if (r + 1) % 10 == 0 or r + 1 == self.args.rounds:
                progress(f"round {r + 1}/{self.args.rounds}")
        self.stop_children()

    def stop_children(self) -> None:
        for child in self.children.values():
            child.quit()
        self.children.clear()

    def counts(self) -> None:
        for c in self.contenders:
            progress(f"counting one job of {c.name} under strace")
            c.counts = count_one_job(c, self.root)

    def processes(self) -> None:
        """The whole job as a process, each program's runs alternated; the first run of each warms the page cache."""
        self.process = {k: [] for k in self.programs}
        self.process_cpu: dict[str, list] = {k: [] for k in self.programs}
        keys = list(self.programs)
        for n in range(self.args.process_runs + 1):
            for key in keys[n % len(keys) :] + keys[: n % len(keys)]:
                program = os.path.join(self.programs[key], "durable_job.py")
                ms, cpu = process_job(program, self.manifest, self.root, self.env, f"process ({key})")
                if n:
                    self.process[key].append(ms)
                    self.process_cpu[key].append(cpu)
            progress(f"whole job as a process: run {n + 1}/{self.args.process_runs + 1}")

    def close(self) -> None:
        for child in self.children.values():
            child.proc.kill()
            child.proc.wait()
        if self.provider is not None:
            self.provider.terminate()
            self.provider.wait(timeout=10)
        if self.server is not None:
            self.server.stop()


def main(argv=None) -> int:
    args = parse_args(argv)
    root = tempfile.mkdtemp(prefix="durable-job-floor-")
    load_before = os.getloadavg()[0]
    run = Floor(args, root)
    try:
        run.set_up()
        run.make_contenders()
        run.start_children()
        run.rounds()
        if not args.skip_counts:
            run.counts()
        run.processes()
        return report(run, (load_before, os.getloadavg()[0]))
    except BenchError as exc:
        print(f"floor: {exc}", file=sys.stderr)
        return 2
    finally:
        run.close()
        if args.keep:
            progress(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def report(run: Floor, load: tuple) -> int:
    args, contenders, process, floor_env = run.args, run.contenders, run.process, run.floor_env
    floor = f"fsync floor {args.floor_ms:g} ms (LD_PRELOAD) in every contender and the PostgreSQL server" if floor_env else "no fsync floor"
    if floor_env and not run.server_floor:
        floor += " (NOT loaded in the server)"
    print()
    print(
        f"floor benchmark — Python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs; {floor}"
    )
    print(
        f"The same 3-item job, the same request bodies, answers from one loopback server; in-process, start-up excluded; "
        f"medians of {args.rounds} alternated rounds after one warm-up"
    )
    print()
    rows = []
    dbos = {c.backend: median(c.ms) for c in contenders if c.key.startswith("dbos")}
    for c in contenders:
        k = c.counts
        vs = f"{median(c.ms) / dbos[c.backend]:.2f}x" if c.backend in dbos else "-"
        rows.append(
            [
                c.name,
                c.backend,
                f"{median(c.ms):.1f}",
                f"{min(c.ms):.1f}",
                f"{median(c.cpu):.0f}",
                vs,
                len(c.ms),
                k.get("commits", "-") if k else "-",
                ("-" if not k else f"{k.get('pg_aborts', 0)}" if c.server else "-"),
                k.get("fsyncs", "-") if k else "-",
                k.get("server_fsyncs", "-") if k and c.server else "-",
                c.version,
            ]
        )
    print(
        table(
            [
                "contender",
                "backend",
                "ms a job",
                "min ms",
                "cpu ms",
                "x DBOS",
                "rounds",
                "commits a job",
                "aborts",
                "fsyncs (client)",
                "fsyncs (server)",
                "versions",
            ],
            rows,
            {2, 3, 4, 5, 6, 7, 8, 9, 10},
        )
    )
    if not args.skip_counts:
        print(
            "(commits: SQLite WAL commit frames + rollback-journal commits + database files linked into place, from an strace -f of one job, set-up of a new file included; "
            "PostgreSQL COMMIT records by pg_waldump between the LSNs before and after the job; fsyncs: fsync+fdatasync calls in the "
            "contender's process (strace -f) and in the server's processes (strace -f -c attached) during that one job; "
            "x DBOS: median ms a job / DBOS's on the same backend)"
        )
    if not any(c.key.startswith("dbos") for c in contenders):
        print(f"DBOS: {run.dbos_note}: its rows and the ratios against it are skipped.")
    by_key = {c.key: c for c in contenders}

    print()
    if process:
        print("whole job as a process: python durable_job.py start --manifest M --state-dir NEW --json, start-up included, to the review")
        for key, label in (("now", "this checkout"), ("before", f"the program at {args.before}")):
            if key in process:
                runs, cpu = process[key], run.process_cpu[key]
                print(
                    f"  {label}: median {median(runs):.0f} ms, min {min(runs):.0f} ms, cpu {median(cpu):.0f} ms, "
                    f"{len(runs)} runs" + (" (alternated)" if len(process) > 1 else "")
                )

    targets = []

    def target(what: str, value, limit: float, shown: str, beside: str = "-", unit: str = "") -> None:
        if value is None:
            targets.append([what, f"<= {limit:g}{unit}", "n/a", beside, "-"])
        else:
            targets.append([what, f"<= {limit:g}{unit}", shown, beside, "PASS" if value <= limit else "MISS"])

    def counted(key: str, what: str) -> str:
        c = by_key.get(key)
        return f"{c.name}: {c.counts[what]}" if c and c.counts else "-"

    dj_dir, dj_store = by_key["dj-dir"], by_key["dj-store"]
    if not args.skip_counts:
        for what, mine, limit, peer in (
            ("commits, one 3-item start on a new state dir", "dj-dir", TARGET_DIR_COMMITS, "lg-sqlite"),
            ("commits, one 3-item start on a store", "dj-store", TARGET_STORE_COMMITS, "lg-pg"),
            ("fsyncs, that job on a state dir", "dj-dir", TARGET_DIR_FSYNCS, "lg-sqlite"),
        ):
            kind = "fsyncs" if what.startswith("fsyncs") else "commits"
            before = counted(f"{mine}-before", kind)
            beside = counted(peer, kind) + ("" if before == "-" else f"; {before}")
            target(what, by_key[mine].counts[kind], limit, str(by_key[mine].counts[kind]), beside)
    floor = "" if floor_env else ", no floor"
    for mine, theirs, graph, backend in ((dj_dir, "dbos-sqlite", "lg-sqlite", "SQLite"), (dj_store, "dbos-pg", "lg-pg", "PostgreSQL")):
        peer = by_key.get(theirs)
        what = f"in-process time a job vs DBOS, {backend}"
        if peer is None:
            target(what, None, TARGET_VS_DBOS, "", unit="x")
            continue
        ratio = median(mine.ms) / median(peer.ms)
        shown = f"{ratio:.2f}x ({median(mine.ms):.0f} / {median(peer.ms):.0f} ms, {len(mine.ms)} rounds{floor})"
        beside = f"{by_key[graph].name}: {median(by_key[graph].ms) / median(peer.ms):.2f}x"
        earlier = by_key.get(mine.key + "-before")
        if earlier is not None:
            beside += f"; @{args.before}: {median(earlier.ms) / median(peer.ms):.2f}x"
        target(what, ratio, TARGET_VS_DBOS, shown, beside, unit="x")
        if backend == "PostgreSQL":
            target(f"{what} (issue 46)", ratio, TARGET_VS_DBOS_STORE, shown, beside, unit="x")
            target(f"{what} (issue 46, proposed)", ratio, PROPOSED_VS_DBOS_STORE, shown, beside, unit="x")
    if "before" in process:
        now, before = median(process["now"]), median(process["before"])
        shown = f"{now / before:.2f}x ({now:.0f} / {before:.0f} ms, {len(process['now'])} runs each)"
        cpu = median(run.process_cpu["now"]) / median(run.process_cpu["before"])
        least = min(process["now"]) / min(process["before"])
        beside = f"cpu {cpu:.2f}x, min {least:.2f}x (steadier on a shared machine)"
        target(f"whole job as a process vs {args.before}", now / before, TARGET_PROCESS, shown, beside, unit="x")
    print()
    print(table(["target", "limit", "measured", "beside it", "result"], targets, set()))
    print()
    if max(load) > 0.5 * (os.cpu_count() or 1):
        print(
            f"Note: load average {load[0]:.2f} before and {load[1]:.2f} after on {os.cpu_count()} CPUs: "
            "other work shared the machine, so the times are noisy (cpu ms is steadier)."
        )
    misses = [t for t in targets if t[-1] == "MISS"]
    for note in args.notes:
        print(f"Note: {note}.")
    unmeasured = [t[0] for t in targets if t[-1] == "-"]
    if misses:
        print("MISS: " + "; ".join(f"{t[0]} = {t[2]} (limit {t[1]})" for t in misses))
    elif len(unmeasured) < len(targets):
        print("Every measured target met.")
    if unmeasured:
        print("Not measured in this run: " + "; ".join(unmeasured))
    return 1 if misses and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
