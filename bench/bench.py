#!/usr/bin/env python3
"""durable_job benchmark: a report, not a timed test (`make bench`).

Measures, in one run and several times each (medians):

* the baselines: `python -c pass`, the same interpreter doing one SQLite read of
  the job's journal, and `python -c "import langgraph.graph"`;
* every command on the built-in demo job: start, status, inspect,
  inspect --html, verify, decide, resume; and, to show the compile floor,
  `python -c` compiling durable_job.py and `status` run as
  `python -m durable_job` (cached bytecode, not the SPEC's invocation);
* the 3-item openai-mode job against the loopback provider
  (tests/provider_server.py) answering each call after 1 s, at
  maxConcurrentCalls 1 and 3 (wall time of `start`, start-up included);

* 40 one-item openai jobs submitted to a throwaway PostgreSQL store, run by 1, 2,
  4 and 8 `work --until-idle` processes started together against the loopback
  provider answering each call after 0.5 s (wall time until the last worker
  exits; cpu ms is all the workers' CPU together): `--workers-only` runs just
  this part, `--skip-workers` leaves it out;

* `jobs` over LISTING_JOBS (1,000) finished (decided) jobs in a store, the jobs made
  in bulk through the program's own command API in this process (open_store, start,
  decide), against `psql` reading the same rows as JSON (each job's record,
  manifest, calls, latest checkpoint and receipt); `--listing-jobs N` sets N,
  `--skip-listing` leaves it out;
* `status` of a store job (read through psycopg, the store's one driver) against
  `status` of a state-directory job, and the whole fake job (start+decide) in a
  store against one in a state directory; `--skip-store` leaves these out;
* with `--before REV`: the same figures for the program as it was at git
  revision REV (`git show REV:durable_job.py`), measured first in the same run,
  and a table of before, after and their ratio per figure;

and prints one table: each figure, its median, its baseline, the ratio and,
where the speed issue sets one, the target with PASS or MISS. Targets:

* durable-job status  <= 2x  (the installed command, from cached bytecode, against
                  one interpreter that starts and does one SQLite read); the
                  script form `python durable_job.py status` is shown without a
                  target: it compiles the whole file every time (the compile floor)
* inspect         <= 0.5x a process that imports the graph: both
                  `python -c "import langgraph.graph"` (the stricter reference,
                  independent of durable_job's own speed) and `resume` on a
                  job waiting at review are shown
* 3 items @ 1 s   concurrency 3 <= 0.60x concurrency 1 (wall time, start-up included;
                  the parallel calls go out only once the graph runs)
* 40 jobs @ 0.5 s 4 workers <= 0.45x 1 worker (wall time, start-up included)
* jobs over 1,000 <= 3x psql reading the same rows as JSON

Alongside the wall-clock medians it shows each child's CPU time (user+sys,
steadier on a shared machine) and the peak RSS of single processes (from the
child's own rusage: the ru_maxrss that RUSAGE_CHILDREN reports, per child).

Everything happens in a fresh temporary directory: durable_job.py, the demo
manifest and its fixtures are copied there (so a concurrent edit of the
repository cannot break a run half-way, and nothing is written into the
repository). Every command runs as a subprocess of this interpreter.

Exit status: 0 after reporting (a MISS is reported, not failed), 1 with
--strict when a target is missed, 2 when a command itself failed (no figure).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import three_items  # bench/, beside this script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(REPO, "durable_job.py")
PROVIDER = os.path.join(REPO, "tests", "provider_server.py")
DEMO_MANIFEST = "manifest.structural.json"
DEMO_FIXTURES = "fixtures"
FAKE_KEY = "sk-bench-not-a-secret"
LATENCY = "slow:1"

SOURCES = three_items.SOURCES

# The SQL `status` runs against the journal, done by a bare interpreter: the
# "python -c pass plus one SQLite read" baseline.
SQLITE_READ = (
    "import sqlite3,sys;"
    "c=sqlite3.connect('file:'+sys.argv[1]+'?mode=ro',uri=True);"
    "c.execute('SELECT operation_key,item_id,status,response_id,request_id FROM calls ORDER BY created_utc,rowid').fetchall();"
    "c.close()"
)

# What running a one-file program costs before its first line executes: CPython
# never caches bytecode for the script it is given, so every command compiles
# all of durable_job.py.
COMPILE = "import sys; compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')"

# The same status, run as `python -m durable_job` from the job's folder: runpy loads
# the bytecode cached in __pycache__ instead of compiling the file. It shows what
# the compile floor costs; the SPEC's invocation is `python durable_job.py`.
CACHED_STATUS = "status via python -m (cached bytecode)"

# The installed console script (`pip install .` of the same bytes into a private
# folder): what a user who ran `pipx install .` or `make demo` types.
INSTALLED_STATUS = "durable-job status (installed)"


def same_status(doc: dict, status: Run) -> bool:
    """The same answer as `python durable_job.py status`, but for the program each suggested command names."""

    def plain(d):
        return {k: v for k, v in d.items() if k != "next"}

    return plain(doc) == plain(json.loads(status.stdout))


# The listing's jobs, made through the command API of the program on PYTHONPATH: argv = URL, base manifest, count.
LISTING_MAKER = """
import json, sys
import durable_job as dj
url, base, count = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3])
with dj.open_store(store=url) as opened:
    for n in range(count):
        manifest = f"listing-{n}.json"
        with open(manifest, "w") as fh:
            json.dump({**base, "jobId": f"listing-{n:05d}"}, fh)
        dj.start(opened, manifest)
        with dj.open_store(store=url, job=f"listing-{n:05d}") as store:
            dj.decide(store, decision="hold", reviewer="bench", reason="a finished job")
"""


class BenchError(Exception):
    """A command failed, so there is no figure to report."""


class Run:
    """One finished child process: wall time, exit code, peak RSS, output."""

    def __init__(self, seconds, cpu, code, maxrss_kib, stdout, stderr):
        self.seconds = seconds
        self.cpu = cpu
        self.code = code
        self.maxrss_kib = maxrss_kib
        self.stdout = stdout
        self.stderr = stderr


def clean_env(**extra) -> dict:
    """This machine's environment without provider or crash settings; no bytecode written anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DURABLE_JOB_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def run(argv, *, cwd, env, label) -> Run:
    """Run argv to completion; time it and read its own rusage (wait4: ru_maxrss of this child alone).

    ru_maxrss is the same kernel figure getrusage(RUSAGE_CHILDREN) reports, but
    per child, so a big earlier child cannot mask a small later one.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    rss = usage.ru_maxrss // 1024 if sys.platform == "darwin" else usage.ru_maxrss  # bytes on macOS, KiB elsewhere
    if proc.returncode != 0:
        raise BenchError(f"{label}: exit {proc.returncode}\n  argv: {' '.join(argv)}\n  stderr: {stderr.strip()[:800]}")
    return Run(seconds, usage.ru_utime + usage.ru_stime, proc.returncode, rss, stdout, stderr)


def expect_json(result: Run, label: str, check) -> dict:
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        raise BenchError(f"{label}: stdout is not JSON: {result.stdout[:300]!r}") from None
    problem = check(doc)
    if problem:
        raise BenchError(f"{label}: unexpected output ({problem}): {result.stdout[:400]}")
    return doc


class Bench:
    def __init__(self, root: str, runs: int, latency_runs: int, source_program: str = PROGRAM):
        self.root = root
        self.source_program = source_program
        self.runs = runs
        self.latency_runs = latency_runs
        self.py = sys.executable
        self.times: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self.rss: dict[str, list[int]] = {}
        self.work = os.path.join(root, "demo")
        self.program = os.path.join(self.work, "durable_job.py")
        self.env = clean_env()
        self.counter = 0
        self.load = None

    # -- bookkeeping ---------------------------------------------------------

    def record(self, name: str, result: Run) -> Run:
        self.times.setdefault(name, []).append(result.seconds)
        self.cpu.setdefault(name, []).append(result.cpu)
        self.rss.setdefault(name, []).append(result.maxrss_kib)
        return result

    def cli(self, name, *args, env=None, record=True, cwd=None) -> Run:
        result = run([self.py, self.program, *args], cwd=cwd or self.work, env=env or self.env, label=name)
        return self.record(name, result) if record else result

    def new_state(self, prefix: str) -> str:
        self.counter += 1
        return os.path.join(self.root, f"{prefix}-{self.counter}", "state")

    # -- set-up --------------------------------------------------------------

    def prepare_demo(self) -> None:
        os.makedirs(self.work)
        shutil.copy2(self.source_program, self.program)
        self.copy_team(self.work)
        shutil.copy2(os.path.join(REPO, DEMO_MANIFEST), os.path.join(self.work, DEMO_MANIFEST))
        shutil.copytree(os.path.join(REPO, DEMO_FIXTURES), os.path.join(self.work, DEMO_FIXTURES))
        # the bytecode `python -m durable_job` loads instead of compiling (the owner's option, not the SPEC's invocation)
        subprocess.run(
            [self.py, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True)", self.program], check=True, env=self.env
        )
        self.install_copy()

    def copy_team(self, folder: str) -> None:
        """The team's extensions (durable_job_team: the store, its workers, the web app) beside the copied program, when
        they are beside the program measured (a program from before they moved out of durable_job.py has none)."""
        team = os.path.join(os.path.dirname(os.path.abspath(self.source_program)), "durable_job_team")
        if os.path.isdir(team):
            shutil.copytree(team, os.path.join(folder, "durable_job_team"), ignore=shutil.ignore_patterns("__pycache__"))

    def install_copy(self) -> None:
        """pip install (no deps, offline build) of the copied program into a private folder, as `pip install .` would."""
        project = os.path.join(self.root, "project")
        os.makedirs(project)
        shutil.copy2(self.program, project)
        self.copy_team(project)
        for name in ("pyproject.toml", "README.md", "requirements.txt"):
            own = os.path.join(os.path.dirname(os.path.abspath(self.source_program)), name)  # a before's own pyproject
            shutil.copy2(own if os.path.exists(own) else os.path.join(REPO, name), project)
        self.site = os.path.join(self.root, "site")
        proc = subprocess.run(
            [
                self.py,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                self.site,
                project,
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BenchError(f"pip install of the project failed: {proc.stderr.strip()[-800:]}")
        self.installed_env = clean_env(PYTHONPATH=self.site)

    def start_demo(self, name: str | None) -> tuple[str, Run]:
        state = self.new_state("demo")
        os.makedirs(os.path.dirname(state))
        result = self.cli(name or "setup", "start", "--manifest", DEMO_MANIFEST, "--state-dir", state, "--json", record=name is not None)
        expect_json(
            result,
            "start",
            lambda d: None if d.get("interrupt") and len(d.get("results", [])) == 2 else "not waiting at review with 2 results",
        )
        return state, result

    # -- the demo job --------------------------------------------------------

    def demo_round(self, demo_state: str, html_path: str) -> None:
        """One timed round of every figure (round-robin, so drift spreads over all figures)."""
        journal = os.path.join(demo_state, "effects.sqlite")
        self.record("python -c pass", run([self.py, "-c", "pass"], cwd=self.work, env=self.env, label="python -c pass"))
        self.record("python + 1 SQLite read", run([self.py, "-c", SQLITE_READ, journal], cwd=self.work, env=self.env, label="sqlite read"))
        self.record(
            "python + compile durable_job.py", run([self.py, "-c", COMPILE, self.program], cwd=self.work, env=self.env, label="compile")
        )
        self.record(
            "import langgraph.graph",
            run([self.py, "-c", "import langgraph.graph"], cwd=self.work, env=self.env, label="import langgraph.graph"),
        )
        fresh, _ = self.start_demo("start")
        status = self.cli("status", "status", "--state-dir", demo_state, "--json")
        expect_json(status, "status", lambda d: None if len(d.get("calls", [])) == 2 else "expected 2 calls")
        cached = self.record(
            CACHED_STATUS,
            run(
                [self.py, "-m", "durable_job", "status", "--state-dir", demo_state, "--json"],
                cwd=self.work,
                env=self.env,
                label=CACHED_STATUS,
            ),
        )
        expect_json(cached, CACHED_STATUS, lambda d: None if same_status(d, status) else "differs from status")
        installed = self.record(
            INSTALLED_STATUS,
            run(
                [os.path.join(self.site, "bin", "durable-job"), "status", "--state-dir", demo_state, "--json"],
                cwd=self.work,
                env=self.installed_env,
                label=INSTALLED_STATUS,
            ),
        )
        expect_json(installed, INSTALLED_STATUS, lambda d: None if same_status(d, status) else "differs from status")
        inspect = self.cli("inspect", "inspect", "--state-dir", demo_state, "--json")
        expect_json(
            inspect,
            "inspect",
            lambda d: None if d.get("resultsSha256") and not d.get("sealBroken") else "no resultsSha256 or a broken seal",
        )
        self.cli("inspect --html", "inspect", "--state-dir", demo_state, "--html", html_path, "--json")
        if not os.path.getsize(html_path):
            raise BenchError("inspect --html wrote an empty page")
        self.cli("verify", "verify", "--state-dir", demo_state, "--json")
        resume = self.cli("resume (waiting job)", "resume", "--state-dir", demo_state, "--json")
        expect_json(resume, "resume", lambda d: None if d.get("interrupt") else "not waiting at review")
        decide = self.cli(
            "decide",
            "decide",
            "--state-dir",
            fresh,
            "--decision",
            "hold",
            "--reviewer",
            "bench",
            "--reason",
            "benchmark run: nothing to approve",
            "--json",
        )
        expect_json(decide, "decide", lambda d: None if (d.get("final") or {}).get("decision") == "hold" else "no final hold")

    def demo(self):
        """The demo job's figures: a generator that yields after its set-up and after each round, so that two
        programs' rounds can alternate (drift on a shared machine then falls on both alike)."""
        self.prepare_demo()
        demo_state, _ = self.start_demo(None)
        html_path = os.path.join(self.root, "review.html")
        # One untimed warm-up round: page cache, site-packages bytecode, SQLite files.
        saved = (self.times, self.cpu, self.rss)
        self.times, self.cpu, self.rss = {}, {}, {}
        self.demo_round(demo_state, html_path)
        self.times, self.cpu, self.rss = saved
        yield
        for n in range(self.runs):
            progress(f"demo round {n + 1}/{self.runs}")
            self.demo_round(demo_state, html_path)
            yield

    # -- a shared PostgreSQL store against a state directory (issue 13) ------

    def team_store(self, server, url: str, role: str = "alice") -> str:
        """The store as a team uses it: set up by its administrator, used by `role` (a person, or a worker) under
        the policies. A program from before roles (issue 21) uses the administrator's URL, as it did."""
        with open(self.program, encoding="utf-8") as fh:
            if "--grant-worker" not in fh.read():
                return url
        out = run(
            [self.py, self.program, "migrate", "--store", url, "--grant", "alice", "--grant-worker", "worker", "--json"],
            cwd=self.work,
            env=self.env,
            label="migrate",
        )
        expect_json(out, "migrate", lambda d: None if d.get("granted") == ["alice"] else "alice not granted")
        return server.role_url(url, role)

    def whole_job(self, name: str, address: list, job_id: str) -> None:
        """start then decide of the demo job (fake mode), as one figure: the sum of both processes."""
        manifest = os.path.join(self.work, f"{job_id}.json")
        with open(os.path.join(self.work, DEMO_MANIFEST)) as fh:
            data = json.load(fh)
        data["jobId"] = job_id
        with open(manifest, "w") as fh:
            json.dump(data, fh)
        start = self.cli(name, "start", "--manifest", manifest, *address, "--json", record=False)
        expect_json(start, f"{name} start", lambda d: None if d.get("interrupt") else "not waiting at review")
        where = address + (["--job", job_id] if "--store" in address else [])
        decide = self.cli(
            name, "decide", *where, "--decision", "hold", "--reviewer", "bench", "--reason", "benchmark", "--json", record=False
        )
        expect_json(decide, f"{name} decide", lambda d: None if (d.get("final") or {}).get("decision") == "hold" else "no final hold")
        self.record(name, Run(start.seconds + decide.seconds, start.cpu + decide.cpu, 0, max(start.maxrss_kib, decide.maxrss_kib), "", ""))

    def store(self):
        """The store's figures (a generator, as demo is)."""
        sys.path.insert(0, os.path.join(REPO, "tests"))
        from pg_server import PgServer

        if not os.path.exists(self.program):
            self.prepare_demo()
        server = PgServer.start(os.path.join(self.root, "pg"))
        self.env = clean_env()  # with the server's PGPASSFILE
        try:
            url = self.team_store(server, server.url)
            state, _ = self.start_demo(None)
            self.whole_job("setup", ["--store", url], "bench-store-job")
            yield
            for n in range(self.runs + 1):  # the first round warms caches, untimed
                progress(f"store round {n + 1}/{self.runs + 1}")
                saved = None if n else (self.times, self.cpu, self.rss)
                if saved:
                    self.times, self.cpu, self.rss = {}, {}, {}
                self.whole_job(STORE_JOB, ["--store", url], f"bench-{n}")
                self.whole_job(DIR_JOB, ["--state-dir", self.new_state("whole")], f"bench-{n}")
                self.cli(DIR_STATUS, "status", "--state-dir", state, "--json")
                out = self.cli(STORE_STATUS, "status", "--store", url, "--job", "bench-store-job", "--json")
                expect_json(
                    out, STORE_STATUS, lambda d: None if len(d.get("calls", [])) == 2 and d.get("store") == url else "expected 2 calls"
                )
                if saved:
                    self.times, self.cpu, self.rss = saved
                yield
        finally:
            server.stop()

    # -- a store that has grown: `jobs` over N finished jobs (issue 20) ------

    def listing(self, count: int) -> None:
        """N decided jobs made through the program's command API in this process, then `jobs` against psql's raw read."""
        sys.path.insert(0, os.path.join(REPO, "tests"))
        from pg_server import PgServer, pg_bin

        if not os.path.exists(self.program):
            self.prepare_demo()
        with open(self.program, encoding="utf-8") as fh:
            if "def open_store(" not in fh.read():
                progress("listing: this program has no command API to make the jobs with; skipped")
                return
        server = PgServer.start(os.path.join(self.root, "pg-listing"))
        self.env = clean_env()
        try:
            url = self.team_store(server, server.url)
            began = time.perf_counter()
            # in a process of the program's own (its durable_job_team beside it is the one a store job must run)
            run(
                [self.py, "-c", LISTING_MAKER, url, os.path.join(self.work, DEMO_MANIFEST), str(count)],
                cwd=self.work,
                env={**self.env, "PYTHONPATH": os.path.dirname(os.path.abspath(self.program))},
                label="listing jobs",
            )
            progress(f"listing: made {count} finished jobs in {time.perf_counter() - began:.0f} s")
            psql = [pg_bin("psql"), "-X", "-At", url, "-c", LISTING_SQL]
            for n in range(self.runs + 1):  # the first round warms the server's caches, untimed
                raw = run(psql, cwd=self.work, env=self.env, label=LISTING_RAW)
                listed = run([self.py, self.program, "jobs", "--store", url, "--json"], cwd=self.work, env=self.env, label=LISTING)
                expect_json(listed, LISTING, lambda d: None if len(d["jobs"]) == count else f"{len(d['jobs'])} jobs listed, not {count}")
                if n:
                    self.record(LISTING_RAW, raw)
                    self.record(LISTING, listed)
        finally:
            server.stop()

    # -- the 3-item job at 1 s latency --------------------------------------

    def start_provider(self, latency: str = LATENCY, name: str = "provider"):
        folder = os.path.join(self.root, name)
        os.makedirs(folder)
        behaviour = os.path.join(folder, "behaviour.json")
        with open(behaviour, "w", encoding="utf-8") as fh:
            json.dump(latency, fh)
        proc = subprocess.Popen(
            [self.py, PROVIDER, "--log", os.path.join(folder, "provider.log"), "--behaviour-file", behaviour],
            cwd=folder,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = proc.stdout.readline().strip()
        if not line.startswith("READY "):
            proc.kill()
            proc.wait()
            raise BenchError(f"provider server did not start (said {line!r})")
        return proc, line.split(" ", 1)[1]

    def latency_manifest(self, concurrency: int) -> str:
        folder = os.path.join(self.root, "latency-src")
        return three_items.write_manifest(folder, f"manifest-c{concurrency}.json", f"bench-latency-c{concurrency}", concurrency)

    def latency(self) -> None:
        if not os.path.exists(self.program):
            self.prepare_demo()
        manifests = {c: self.latency_manifest(c) for c in (1, 3)}
        proc, base_url = self.start_provider()
        try:
            env = clean_env(OPENAI_API_KEY=FAKE_KEY, OPENAI_BASE_URL=base_url)
            for n in range(self.latency_runs):
                progress(f"latency round {n + 1}/{self.latency_runs}")
                for c in (1, 3):
                    name = f"3 items @ 1 s, concurrency {c}"
                    state = self.new_state(f"latency-c{c}")
                    os.makedirs(os.path.dirname(state))
                    result = self.cli(
                        name, "start", "--manifest", manifests[c], "--state-dir", state, "--json", env=env, cwd=os.path.dirname(state)
                    )
                    expect_json(
                        result,
                        name,
                        lambda d: (
                            None
                            if d.get("interrupt") and [r["status"] for r in d["results"]] == ["validated"] * 3
                            else f"expected 3 validated results, got {[r.get('status') for r in d.get('results', [])]}"
                        ),
                    )
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # -- 40 one-item jobs run by 1, 2, 4, 8 `work` processes (issue 14) ------

    def submit_many(self, url: str, count: int) -> None:
        """Seal `count` one-item openai jobs into the store (one interpreter: submitting is not what is timed)."""
        folder = os.path.join(self.root, "work-src")
        os.makedirs(folder, exist_ok=True)
        data = SOURCES["alpha"].encode("utf-8")
        with open(os.path.join(folder, "alpha.txt"), "wb") as fh:
            fh.write(data)
        paths = []
        for n in range(count):
            manifest = {
                "schemaVersion": 1,
                "jobId": f"work-{n:02d}",
                "approved": True,
                "approvedBy": "bench@example.test",
                "mode": "openai",
                "model": "gpt-bench",
                "providerTransferApproved": True,
                "maxModelCalls": 2,
                "maxAttemptsPerItem": 1,
                "items": [{"id": "alpha", "path": "alpha.txt", "sha256": hashlib.sha256(data).hexdigest()}],
            }
            paths.append(os.path.join(folder, f"work-{n:02d}.json"))
            with open(paths[-1], "w", encoding="utf-8") as fh:
                json.dump(manifest, fh)
        code = (
            "import sys, durable_job; url = sys.argv[1]\n"
            "sys.exit(max(durable_job.main(['submit', '--manifest', m, '--store', url, '--json']) for m in sys.argv[2:]))"
        )
        run([self.py, "-c", code, url, *paths], cwd=self.work, env=self.env, label="submit 40 jobs")

    def workers(self) -> None:
        sys.path.insert(0, os.path.join(REPO, "tests"))
        from pg_server import PgServer

        if not os.path.exists(self.program):
            self.prepare_demo()
        server = PgServer.start(os.path.join(self.root, "pg-work"))
        self.env = clean_env()
        proc, base_url = self.start_provider("slow:0.5", "provider-work")
        env = clean_env(OPENAI_API_KEY=FAKE_KEY, OPENAI_BASE_URL=base_url)
        try:
            for n in range(self.work_runs):
                for count in WORKER_COUNTS:
                    progress(f"workers round {n + 1}/{self.work_runs}: {WORK_JOBS} jobs, {count} worker(s)")
                    url = server.new_database(f"work{n}x{count}")
                    owner = self.team_store(server, url)
                    self.submit_many(owner, WORK_JOBS)
                    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
                    self.children_cpu = usage.ru_utime + usage.ru_stime  # what the submit and earlier children used
                    self.run_workers(url if owner == url else server.role_url(url, "worker"), count, env)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            server.stop()

    def run_workers(self, url: str, count: int, env: dict) -> None:
        """`count` `work --until-idle` processes started together; the figure is the wall time until the last exits."""
        argv = [self.py, self.program, "work", "--store", url, "--until-idle", "--json"]
        began = time.perf_counter()
        procs = [
            subprocess.Popen(
                argv, cwd=self.work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(count)
        ]
        runs = 0
        for p in procs:
            out, err = p.communicate(timeout=600)  # a small summary and a line per transition: the pipes never fill
            if p.returncode != 0:
                raise BenchError(f"work: exit {p.returncode}: {err.strip()[-600:]}")
            runs += len(json.loads(out)["runs"])
        seconds = time.perf_counter() - began
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every worker has been waited for: their CPU is in here
        cpu = usage.ru_utime + usage.ru_stime - self.children_cpu
        self.children_cpu += cpu
        jobs = expect_json(
            run([self.py, self.program, "jobs", "--store", url, "--json"], cwd=self.work, env=self.env, label="jobs"),
            "jobs",
            lambda d: None if [j["phase"] for j in d["jobs"]] == ["awaiting-review"] * WORK_JOBS else "not every job at review",
        )
        if runs != WORK_JOBS or len(jobs["jobs"]) != WORK_JOBS:
            raise BenchError(f"{count} workers ran {runs} jobs, expected {WORK_JOBS}")
        self.record(work_figure(count), Run(seconds, cpu, 0, 0, "", ""))  # cpu: all the workers' user+sys together


def work_figure(count: int) -> str:
    return f"{WORK_JOBS} jobs @ 0.5 s, {count} worker{'s' if count > 1 else ''}"


WORK_JOBS = 40
WORKER_COUNTS = (1, 2, 4, 8)


def progress(text: str) -> None:
    print(f"bench: {text}", file=sys.stderr, flush=True)


# -- the report --------------------------------------------------------------

LISTING_JOBS = 1000
LISTING = "jobs, store of N finished jobs"
LISTING_RAW = "psql: the same rows as JSON"
# What `jobs` reads of every job, as one psql query returning JSON: the raw read a listing cannot beat.
LISTING_SQL = (
    "SELECT json_agg(x) FROM (SELECT j.job_id, j.record_json, encode(j.manifest, 'hex') AS manifest, "
    "(SELECT json_agg(c ORDER BY c.created_utc, c.seq) FROM durable_job.calls c WHERE c.job_id = j.job_id) AS calls, "
    "(SELECT k.checkpoint FROM durable_job.checkpoints k WHERE k.thread_id = j.thread_id AND k.checkpoint_ns = '' "
    "ORDER BY k.checkpoint_id DESC LIMIT 1) AS checkpoint, r.job_id IS NOT NULL AS receipt "
    "FROM durable_job.jobs j LEFT JOIN durable_job.receipts r USING (job_id) ORDER BY j.created_utc, j.job_id) x"
)
STORE_JOB = "whole fake job (start+decide), store"
DIR_JOB = "whole fake job (start+decide), state dir"
STORE_STATUS = "status, store job"
DIR_STATUS = "status, state-dir job"

# figure, baseline figure, target ratio (None: reported, no target)
ROWS = [
    ("python -c pass", None, None),
    ("python + 1 SQLite read", "python -c pass", None),
    ("python + compile durable_job.py", "python -c pass", None),
    ("import langgraph.graph", "python -c pass", None),
    ("python + compile durable_job.py", "python + 1 SQLite read", None),
    ("status", "python + 1 SQLite read", None),
    (CACHED_STATUS, "python + 1 SQLite read", None),
    (INSTALLED_STATUS, "python + 1 SQLite read", 2.0),
    ("inspect", "import langgraph.graph", 0.5),
    ("inspect --html", "import langgraph.graph", 0.5),
    ("inspect", "resume (waiting job)", 0.5),
    ("verify", "python -c pass", None),
    ("resume (waiting job)", "import langgraph.graph", None),
    ("start", "import langgraph.graph", None),
    ("decide", "import langgraph.graph", None),
    ("3 items @ 1 s, concurrency 1", None, None),
    ("3 items @ 1 s, concurrency 3", "3 items @ 1 s, concurrency 1", 0.60),
    (DIR_JOB, None, None),
    (STORE_JOB, DIR_JOB, 1.3),
    (work_figure(1), None, None),
    (work_figure(2), work_figure(1), None),
    (work_figure(4), work_figure(1), 0.45),
    (work_figure(8), work_figure(1), None),
    (DIR_STATUS, None, None),
    # no target: a store's read imports psycopg, its one driver, and may cost what that costs (about 2x here)
    (STORE_STATUS, DIR_STATUS, None),
    (LISTING_RAW, None, None),
    (LISTING, LISTING_RAW, 3.0),
]
RSS_ROWS = [
    ("python -c pass", None),
    ("status", "resume (waiting job)"),
    (INSTALLED_STATUS, "resume (waiting job)"),
    ("inspect", "resume (waiting job)"),
    ("import langgraph.graph", None),
    ("resume (waiting job)", None),
]


def table(headers, rows, right) -> str:
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def report(bench: Bench) -> int:
    med = {name: statistics.median(v) * 1000 for name, v in bench.times.items()}
    cpu = {name: f"{statistics.median(v) * 1000:.0f}" for name, v in bench.cpu.items()}
    rows, misses = [], []
    for name, base, target in ROWS:
        if name not in med:
            continue
        n = len(bench.times[name])
        if base is None or base not in med:
            rows.append([name, f"{med[name]:.1f}", f"{min(bench.times[name]) * 1000:.1f}", cpu[name], n, "-", "-", "-", "-", "-"])
            continue
        ratio = med[name] / med[base]
        verdict = "-" if target is None else ("PASS" if ratio <= target else "MISS")
        if verdict == "MISS":
            misses.append(f"{name} / {base} = {ratio:.2f}x > {target}x")
        rows.append(
            [
                name,
                f"{med[name]:.1f}",
                f"{min(bench.times[name]) * 1000:.1f}",
                cpu[name],
                n,
                base,
                f"{med[base]:.1f}",
                f"{ratio:.2f}x",
                "-" if target is None else f"<= {target}x",
                verdict,
            ]
        )
    print()
    print(
        f"durable_job benchmark — Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} CPUs; medians of {bench.runs} runs (1 s-latency jobs: {bench.latency_runs})"
    )
    print()
    print(
        table(
            ["figure", "median ms", "min ms", "cpu ms", "n", "baseline", "base ms", "ratio", "target", "result"], rows, {1, 2, 3, 4, 6, 7}
        )
    )
    print("(ms: wall time of the whole child process; cpu ms: its user+sys time; ratio: median / baseline median)")
    rss_rows = []
    for name, base in RSS_ROWS:
        if name not in bench.rss:
            continue
        peak = max(bench.rss[name]) / 1024
        ratio = "-" if base is None or base not in bench.rss else f"{peak / (max(bench.rss[base]) / 1024):.2f}x"
        rss_rows.append([name, f"{peak:.1f}", base or "-", ratio])
    if rss_rows:
        print()
        print(table(["peak RSS of one process", "MiB", "compared with", "ratio"], rss_rows, {1, 3}))
    print()
    load = bench.load
    if load and max(load) > 0.5 * (os.cpu_count() or 1):
        print(
            f"Note: load average was {load[0]:.2f} before and {load[1]:.2f} after on {os.cpu_count()} CPUs: "
            "other work shared the machine, so wall times are noisy (cpu ms is steadier)."
        )
    if misses:
        print("MISS: " + "; ".join(misses))
    else:
        print("All targets met.")
    return len(misses)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each demo figure (default 5)")
    parser.add_argument("--latency-runs", type=int, default=3, help="runs of each 1 s-latency job (default 3)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--skip-latency", action="store_true", help="skip the 1 s-latency jobs (about 10 s per round)")
    parser.add_argument("--skip-demo", action="store_true", help="skip the demo-job figures")
    parser.add_argument("--skip-store", action="store_true", help="skip the PostgreSQL store figures (a throwaway server)")
    parser.add_argument("--skip-workers", action="store_true", help="skip the 40-job `work` figures (about a minute per round)")
    parser.add_argument("--workers-only", action="store_true", help="run only the 40-job `work` figures (workers 1, 2, 4, 8)")
    parser.add_argument("--work-runs", type=int, default=1, help="rounds of the 40-job `work` figures (default 1)")
    parser.add_argument("--program", default=PROGRAM, help="benchmark this copy of durable_job.py (default: the repository's)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and print its path")
    parser.add_argument("--skip-listing", action="store_true", help="skip the `jobs` listing of a store of finished jobs")
    parser.add_argument(
        "--listing-jobs", type=int, default=LISTING_JOBS, help=f"finished jobs in the listing's store (default {LISTING_JOBS})"
    )
    parser.add_argument("--before", metavar="REV", help="also measure durable_job.py as it was at git revision REV, first, and compare")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.latency_runs < 1:
        parser.error("--runs and --latency-runs must be at least 1")
    if args.workers_only:
        args.skip_demo = args.skip_latency = args.skip_store = args.skip_listing = True
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    try:
        programs = ([program_at(args.before)] if args.before else []) + [os.path.abspath(args.program)]
        *before, bench = measure(args, programs)
    except BenchError as exc:
        print(f"bench: a command failed, so there is no figure for it:\n  {exc}", file=sys.stderr)
        return 2
    bench.load = (load_before, os.getloadavg()[0]) if load_before is not None else None
    misses = report(bench)
    if before:
        compare(before[0], bench, args.before)
    return 1 if misses and args.strict else 0


def program_at(rev: str) -> str:
    """The program as it was at git revision rev (durable_job.py, its pyproject.toml and, once it had them, the team's
    extensions in durable_job_team/), in a temporary folder; its durable_job.py."""
    folder = tempfile.mkdtemp(prefix="durable_job_before.")
    listed = subprocess.run(["git", "ls-tree", "--name-only", rev], cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        raise SystemExit(f"bench: --before {rev}: {listed.stderr.strip()}")
    paths = [p for p in ("durable_job.py", "pyproject.toml", "durable_job_team") if p in listed.stdout.split()]
    archive = subprocess.run(["git", "archive", rev, *paths], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    return os.path.join(folder, "durable_job.py")


def alternate(rounds: list) -> None:
    """Run several generators of rounds to the end, one step of each in turn."""
    while rounds:
        for gen in list(rounds):
            try:
                next(gen)
            except StopIteration:
                rounds.remove(gen)


def measure(args, programs: list) -> list:
    """Every figure the flags ask for, of each program, each in a temporary directory of its own; the rounds of the
    demo and store figures alternate between the programs, the longer figures run one program after the other."""
    benches = []
    for program in programs:
        bench = Bench(tempfile.mkdtemp(prefix="durable_job_bench."), args.runs, args.latency_runs, program)
        bench.work_runs = max(1, args.work_runs)
        benches.append(bench)
    progress("measuring " + " and ".join(programs))
    try:
        if not args.skip_demo:
            alternate([b.demo() for b in benches])
        if not args.skip_store:
            alternate([b.store() for b in benches])
        for bench in benches:
            if not args.skip_latency:
                bench.latency()
            if not args.skip_listing:
                bench.listing(args.listing_jobs)
            if not args.skip_workers:
                bench.workers()
    finally:
        for bench in benches:
            if args.keep:
                progress(f"kept {bench.root}")
            else:
                shutil.rmtree(bench.root, ignore_errors=True)
    return benches


def compare(before: Bench, after: Bench, rev: str) -> None:
    """Each figure measured for both programs: its median before (at rev) and now, and the ratio."""
    rows = []
    for name, _, _ in ROWS:
        if name in before.times and name in after.times:
            old, new = statistics.median(before.times[name]) * 1000, statistics.median(after.times[name]) * 1000
            old_cpu, new_cpu = statistics.median(before.cpu[name]) * 1000, statistics.median(after.cpu[name]) * 1000
            rows.append([name, f"{old:.1f}", f"{new:.1f}", f"{new / old:.2f}x", f"{old_cpu:.0f}", f"{new_cpu:.0f}"])
    print()
    print(f"before ({rev}) and after (this program), measured in this run:")
    print(table(["figure", "before ms", "after ms", "after/before", "before cpu ms", "after cpu ms"], rows, {1, 2, 3, 4, 5}))


if __name__ == "__main__":
    sys.exit(main())
