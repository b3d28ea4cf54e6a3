"""Workers: `submit` seals a job into a store and runs nothing; `work` processes run the store's jobs.

An extension of durable_job.py (the one-file core) and of the store (durable_job_team/store.py), imported only by
`submit` and `work`. A worker runs each job through the core's resume(), so the journal's protocol is exactly the
one a person's `resume` follows. Outside the engine a store job seals (STORE_ENGINE_PARTS in store.py): a release that changes only this file strands no job.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from typing import Any, cast

from durable_job import (
    NOTIFY_ENV,
    STORE_ENV,
    BusyError,
    JobError,
    Manifest,
    ManifestError,
    Snapshot,
    Store,
    UsageError,
    WaitsForSlot,
    WorkerStopping,
    check_same_job,
    clip,
    code_sha256,
    command_line,
    counted,
    engine_sha256,
    is_hold,
    job_phase,
    latest_rejected,
    manifests_job,
    now_utc,
    printable,
    program_seal,
    read_manifest,
    read_snapshot,
    redact,
    resume,
    sealing_new_job,
    where_it_stands,
)
from durable_job_team.cli import WORK_MAX_CONCURRENCY
from durable_job_team.store import STORE_ENGINE_PARTS, PgStore, need_psycopg

# `submit` seals a job into a store and runs nothing; any number of `work`
# processes, on any machines, run the store's jobs. PostgreSQL is the only
# coordination: a worker claims a job by locking the job's own lock row
# (the lock every writing command takes), so two workers never run one job and
# a killed worker's job is free again at once. A worker runs each job through
# resume(), so the journal's protocol is exactly the one a person's `resume`
# follows: a `pending` row commits before its request, so whatever is killed
# when, no operation key reaches the provider twice, and a call whose outcome
# is unknown waits for a person (a kept call whose id was committed is not
# unknown: the worker's run retrieves its answer from the provider's record).

WORK_IDLE_FIRST = 0.5  # seconds a polling worker first waits when nothing is runnable
WORK_IDLE_MAX = 30.0  # the back-off's ceiling
# The store's jobs a worker may take on, oldest first. A prefilter only (the
# decision is made under the job's lock): its lock row free (no open
# transaction holds it, by its xmax in pg_locks), no uncertain call (a pending
# one without a response id: a kept call submitted is retrieved by the run), not
# cancelled, no receipt, and not waiting at the review (its latest checkpoint
# has no interrupt write). Only unfinished jobs are read (finished_at, m008: the
# jobs_unfinished index), so a poll costs the same however many jobs have ended.
RUNNABLE_SQL = """
SELECT j.job_id, (SELECT h.program FROM durable_job.holds h WHERE h.job_id = j.job_id) AS held_by FROM durable_job.jobs j
WHERE j.finished_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM durable_job.job_locks k
                  JOIN pg_catalog.pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = k.xmax AND l.mode = 'ExclusiveLock' AND l.granted
                  WHERE k.job_id = j.job_id)
  AND NOT EXISTS (SELECT 1 FROM durable_job.calls c WHERE c.job_id = j.job_id AND c.status = 'pending' AND c.response_id IS NULL)
  AND NOT EXISTS (SELECT 1 FROM durable_job.outcomes o WHERE o.job_id = j.job_id AND o.kind = 'cancel')
  AND NOT EXISTS (SELECT 1 FROM durable_job.receipts r WHERE r.job_id = j.job_id)
  AND NOT EXISTS (SELECT 1 FROM durable_job.checkpoint_writes w
                  WHERE w.thread_id = j.thread_id AND w.checkpoint_ns = '' AND w.channel = '__interrupt__'
                    AND w.checkpoint_id = (SELECT max(k.checkpoint_id) FROM durable_job.checkpoints k
                                           WHERE k.thread_id = j.thread_id AND k.checkpoint_ns = ''))
ORDER BY j.created_utc, j.job_id
"""


def submit(store: Store, manifest_path: str) -> dict:
    """Seal a job into a store as start does, and run nothing: a `work` process runs it."""
    if not isinstance(store, PgStore):
        raise UsageError(f"submit works on a shared store: give --store URL (or set {STORE_ENV}); a --state-dir job runs with `start`")
    manifest, raw = read_manifest(manifest_path)
    with manifests_job(store, manifest) as named:
        return submit_job(cast(PgStore, named), manifest, manifest_path, raw)


def submit_job(store: PgStore, manifest: Manifest, manifest_path: str, raw: bytes) -> dict:
    existing = store.has_job()
    if existing:
        check_same_job(store, manifest, raw)  # the same job is reported as it stands; another request is refused
    else:
        with sealing_new_job(store, manifest, manifest_path, raw, "submit"):
            pass  # sealed, and its lock given back: a worker runs it
    snap = read_snapshot(store)
    try:
        out = where_it_stands(snap, {"jobId": snap.job["jobId"], "existing": existing})
    finally:
        snap.close()
    if out["phase"] in ("not-started", "ready"):  # the worker's own address (its role), never the submitter's
        work = command_line(store.program, "work", worker_address(store), "--until-idle")
        out["next"] = f"waiting for a worker: a worker role runs {work} (or run it here, as its owner: {out['next']})"
    return out


def worker_address(store: PgStore) -> list:
    """The store's flags as a worker's role names them: the submitter's address with WORKER_ROLE for its user."""
    address = store.store_address()
    if address:
        head, sep, rest = address[1].partition("://")
        address = [address[0], f"{head}{sep}WORKER_ROLE@{rest.rpartition('@')[2]}" if "@" in rest else address[1]]
    return address


def manifest_files(paths: list) -> list[str]:
    """The manifests a `submit` names: each file as given, and every `*.json` file in a folder given (by name)."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            inside = sorted(n for n in os.listdir(path) if n.endswith(".json") and os.path.isfile(os.path.join(path, n)))
            if not inside:
                raise UsageError(f"{path} holds no *.json manifest; name the manifest files, or the folder that holds them")
            found += [os.path.join(path, n) for n in inside]
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def submit_all(store: Store, manifests: list, manifest: str | None = None) -> dict:
    """Seal several manifests (files, or folders of *.json manifests) into a store, in order, each in its own
    transaction as `submit` seals one; {"submits": [what submit returns for each]}.

    Every manifest is read and checked first, so a bad one stops the command before anything is sealed. A refusal while
    sealing one (a changed source, a jobId taken) stops there: the HOLD names that manifest, the ones already submitted
    (they stay: nothing is undone) and the ones not tried. The same command again reports the submitted ones as
    existing and goes on from the one that failed.
    """
    if not isinstance(store, PgStore):
        raise UsageError(f"submit works on a shared store: give --store URL (or set {STORE_ENV}); a --state-dir job runs with `start`")
    if manifest is not None and manifests:
        raise UsageError("give the manifests as arguments (submit M1 M2 … or a folder), or one --manifest M, not both")
    if not manifests:
        raise UsageError(
            f"submit needs a manifest: submit M1 M2 … (or a folder of *.json manifests), or --manifest M; see {store.program} submit --help"
        )
    paths = manifest_files(list(manifests))
    if store.job_id and len(paths) > 1:
        raise UsageError(f"--job names one job: leave it out to submit {len(paths)} manifests (each names its own jobId)")
    read: dict[str, str] = {}
    for path in paths:
        try:
            job_id = read_manifest(path)[0]["jobId"]  # a bad manifest stops everything here, before any is sealed
        except JobError as exc:
            raise type(exc)(f"{exc}; nothing was submitted (every manifest is checked before any is sealed)") from None
        if job_id in read:
            raise ManifestError(
                f"Manifests {read[job_id]} and {path} both name jobId {job_id}; give each request its own jobId (nothing was submitted)"
            )
        read[job_id] = path
    done: list[dict] = []
    for n, path in enumerate(paths):
        try:
            manifest_read, raw = read_manifest(path)
            with manifests_job(store, manifest_read) as named:
                done.append({**submit_job(cast(PgStore, named), manifest_read, path, raw), **named.output_fields()})
        except JobError as exc:
            raise type(exc)(f"{path}: {exc} — {submitted_words(done, paths[:n], paths[n + 1 :])}") from None
    return {"submits": done}


def submitted_words(done: list, their_paths: list, untried: list) -> str:
    """What a stopped multiple submit had done: the jobs already sealed (kept) and the manifests not tried."""
    kept = ", ".join(f"{out['jobId']} ({path})" for out, path in zip(done, their_paths)) or "none"
    rest = f"; not tried: {', '.join(untried)}" if untried else ""
    return (
        f"already submitted, and kept: {kept}{rest}; fix this manifest, then run the same submit again (the submitted ones report existing)"
    )


def needs_person(snap: Snapshot) -> bool:
    """Whether a job waits for a person (or for another run): anything but not-started or ready, a rejected latest call,
    or a hold a run of this program met (a release, the owner's resume or another program lifts it)."""
    held = snap.hold is not None and snap.hold.get("program") == program_seal(snap.job)
    return snap.phase not in ("not-started", "ready") or latest_rejected(snap.calls) or held


def progress_mark(snap: Snapshot) -> tuple:
    """What changes when a job moves: a worker that failed on a job tries it again only once this differs."""
    return (snap.phase, len(snap.calls), tuple(r["status"] for r in snap.calls), snap.values.get("index"), len(snap.model_results))


class Worker:
    """One `work` process: up to `concurrency` threads, each claiming a runnable job and running it to its next stop."""

    def __init__(self, store: PgStore, concurrency: int, until_idle: bool, stop: threading.Event | None = None):
        import socket
        import threading

        self.store, self.concurrency, self.until_idle = store, concurrency, until_idle
        self.public = store.public
        self.host = socket.gethostname().split(".")[0]
        self.pid = os.getpid()
        self.stop = stop or threading.Event()
        self.guard = threading.Lock()
        self.saying = threading.Lock()  # one thread's line at a time: print's text and newline are two writes
        self.busy: set = set()  # jobs this process runs right now
        self.failed: dict = {}  # job id -> progress_mark when it last failed here
        self.runs: list = []  # one record per finished run
        self.waiting: dict = {}  # job id -> the seconds its run was told to wait for a slot (wait_for_slot)
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        """One line on stderr per job transition: when, which worker, what."""
        with self.saying:
            print(f"{now_utc()[:19]}Z work {self.host}:{self.pid} {printable(text)}", file=sys.stderr, flush=True)

    def loop(self) -> None:
        """A thread's life: claim, run, repeat; idle with back-off, or end when idle with --until-idle."""
        reader = PgStore(
            self.store.url, "", from_env=self.store.from_env, program=self.store.program, secrets=self.store.secrets, keys=self.store.keys
        )  # a connection per thread
        idle = WORK_IDLE_FIRST
        try:
            while not self.stop.is_set():
                if self.run_one(reader):
                    idle = WORK_IDLE_FIRST
                    continue
                if self.until_idle:
                    return
                self.stop.wait(idle)
                idle = min(idle * 2, WORK_IDLE_MAX)
        finally:
            reader.close()

    def candidates(self, reader: PgStore) -> list:
        db = reader.db()
        if db.rows("SELECT to_regclass('durable_job.checkpoint_writes') IS NOT NULL AS made")[0]["made"] is False:
            return []  # a store not set up yet holds no job
        # a job held by a run of this program waits for a person (m013_holds); one another program's run held (its
        # seals refused that program, say) is left to the others
        mine = (engine_sha256(STORE_ENGINE_PARTS), code_sha256())  # a job sealed since the engine, or before
        return [r["job_id"] for r in db.rows(RUNNABLE_SQL) if r["held_by"] not in mine]

    def run_one(self, reader: PgStore) -> bool:
        """Run the first runnable job this thread can claim; False when there is none."""
        for job_id in self.candidates(reader):
            if self.stop.is_set():
                return False
            with self.guard:
                if job_id in self.busy:
                    continue
                self.busy.add(job_id)
            try:
                if self.try_job(reader.for_job(job_id)):
                    self.wait_for_slot(reader, job_id)
                    return True
            finally:
                with self.guard:
                    self.busy.discard(job_id)
        return False

    def wait_for_slot(self, reader: PgStore, job_id: str) -> None:
        """After a run that ended waiting for a slot (a limit on its endpoint and model): this thread's connections
        closed, wait as long as the store said (a stop ends the wait), the job kept from this process's other threads."""
        seconds = self.waiting.pop(job_id, 0.0)
        if seconds > 0:
            reader.close()
            self.stop.wait(seconds)

    def try_job(self, store: PgStore) -> bool:
        """Run the job if, as read, it needs no person and has not failed here as it stands."""
        try:
            snap = read_snapshot(store)
        except JobError:
            return False  # unreadable: `jobs` and `status` say why
        snap.close()
        mark = progress_mark(snap)
        if needs_person(snap) or self.failed.get(store.job_id) == mark:
            return False
        return self.run_job(store, snap.phase, mark)

    def run_job(self, store: PgStore, phase: str, mark: tuple) -> bool:
        """Claim the job (its lock row) and run it as `resume`; False if it was not ours to run."""
        job_id, began = store.job_id, time.monotonic()
        record: dict[str, Any] = {"jobId": job_id, "from": phase}
        worker_store = store.named_store(job_id)  # its own connections, from the thread's pool: reused job after job
        try:
            out = resume(
                worker_store,
                command="work",
                stop=self.stop,
                runnable_only=True,
                on_claim=lambda: self.say(f"job {job_id}: claimed ({phase})"),
            )
            if out is None:
                return False  # it moved since we looked (another worker, a person): under the lock, it is not runnable
            record["to"] = self.phase_now(store)
            record["results"] = [r["status"] for r in out["results"]]
        except BusyError:
            return False  # another worker (or a person's command) holds it: not a transition
        except WaitsForSlot as waiting:  # nothing pending, nothing held: the thread waits (run_one), then runs on
            record["to"], record["waitsSeconds"] = "waits-for-slot", round(waiting.seconds, 3)
            self.waiting[job_id] = waiting.seconds
        except JobError as exc:
            record["to"] = self.phase_now(store)
            record["hold"] = f"{type(exc).__name__}: {' '.join(redact(exc, store.secrets).split())}"
            record["held"] = is_hold(exc)  # recorded on the job
            record["refused"] = not isinstance(exc, WorkerStopping)  # held or not, `work --until-idle` exits 2
            if not isinstance(exc, WorkerStopping):
                self.failed[store.job_id] = self.mark_now(store, mark)
        except Exception as exc:  # a bug: logged, the job left as it is, the worker goes on
            record["to"] = self.phase_now(store)
            record["hold"] = f"InternalError: {type(exc).__name__}: {clip(redact(exc, store.secrets), 200)}"
            self.failed[store.job_id] = self.mark_now(store, mark)
        finally:
            worker_store.close()
        record["seconds"] = round(time.monotonic() - began, 3)
        with self.guard:
            self.runs.append(record)
        done = f" ({', '.join(record['results'])})" if record.get("results") else ""
        hold = f": HOLD: {record['hold']}" if record.get("hold") else ""
        self.say(f"job {job_id}: {phase} -> {record['to']}{done} in {record['seconds']:.1f} s{hold}")
        return True

    def phase_now(self, store: PgStore) -> str:
        """Where a job this worker just ran stands. Its lock connection is closed, but the server may not have
        ended that session yet: a holder that is this process is not a run any more."""
        try:
            snap = read_snapshot(store)
        except JobError:
            return "unreadable"
        snap.close()
        holder: dict[str, Any] = dict(snap.holder or {})
        ours = holder.get("pid") == self.pid and self.host.startswith(holder.get("host", ""))  # the name may cut the host short
        if snap.phase == "running" and ours:
            return job_phase(snap.review, snap.checkpoint, None)
        return snap.phase

    def mark_now(self, store: PgStore, fallback: tuple) -> tuple:
        try:
            snap = read_snapshot(store)
        except JobError:
            return fallback
        snap.close()
        return progress_mark(snap)

    def run(self, signals: bool = True) -> dict:
        """Run the threads until they end (idle with until_idle, or stopped); the summary `work` prints.

        With signals, SIGTERM and Ctrl-C stop it gracefully: no new job, no new call, the call in flight
        ends within its timeout; a second signal exits at once, leaving that call pending as a kill would.
        """
        import signal
        import threading

        stopped: list = []

        def on_signal(signum, frame):
            if stopped:  # a second signal: go now, as a kill would; a call in flight stays pending
                self.say("second signal: exiting now; a call in flight stays pending (status, then reconcile)")
                os._exit(2)
            stopped.append(signum)
            self.say(f"{signal.Signals(signum).name}: taking no new job; letting in-flight calls end (a second signal exits at once)")
            self.stop.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)} if signals else {}
        self.say(f"started: store {self.public}, concurrency {self.concurrency}" + (", until idle" if self.until_idle else ", polling"))
        try:
            threads = [
                threading.Thread(target=contextvars.copy_context().run, args=(self.loop,), name=f"work-{n}", daemon=True)
                for n in range(self.concurrency)
            ]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)  # short joins: the main thread stays free to take a signal
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        out = self.summary(bool(stopped) or self.stop.is_set())
        self.say(
            f"exiting: {counted(len(self.runs), 'run')}"
            + "".join(f", {n} {k}" for k, n in sorted(out["counts"].items()))
            + (" (stopped by a signal)" if stopped else "")
        )
        return out

    def summary(self, stopped: bool) -> dict:
        counts: dict = {}
        for r in self.runs:
            counts[r["to"]] = counts.get(r["to"], 0) + 1
        return {
            "store": self.public,
            "worker": {"host": self.host, "pid": self.pid},
            "concurrency": self.concurrency,
            "untilIdle": self.until_idle,
            "stopped": stopped,
            "seconds": round(time.monotonic() - self.started, 3),
            "counts": counts,
            "runs": self.runs,
        }


def work(
    store: Store,
    *,
    concurrency: int = 1,
    until_idle: bool = False,
    stop: threading.Event | None = None,
    signals: bool = True,
    notify: str | None = None,
) -> dict:
    """Run the store's jobs that can go on without a person, each to its next stop, up to `concurrency` at once; with a
    notification config (notify, else DURABLE_JOB_NOTIFY) also deliver the store's notifications, the due ones once more
    before exiting."""
    if not isinstance(store, PgStore):
        raise UsageError(f"work works on a shared store: give --store URL (or set {STORE_ENV}); a --state-dir job runs with `start`")
    if not 1 <= concurrency <= WORK_MAX_CONCURRENCY:
        raise UsageError(f"--concurrency {concurrency} is out of range: give 1 to {WORK_MAX_CONCURRENCY} jobs at once per worker")
    need_psycopg()
    path = os.environ.get(NOTIFY_ENV) if notify is None else notify
    if not path:  # no config: nothing of the sender is imported or run
        return Worker(store, concurrency, until_idle, stop).run(signals)
    from durable_job_team import notify as notifying

    sender, boxes = notifying.store_sender(store, notifying.read_config(path))
    halt, thread = notifying.background(sender)
    try:
        out = Worker(store, concurrency, until_idle, stop).run(signals)
    finally:
        halt.set()
        thread.join()
    try:
        sender.once()  # before exiting: every event due now, once more
    finally:
        for box in boxes:
            box.close()
    out["notified"] = sender.delivered
    return out
