"""Faults: a kill at every named crash point, random SIGKILLs over real HTTP, and commands racing on one state dir.

Every test recovers the way the README's runbook tells a person to (status → reconcile a pending row →
resume → decide) and then checks the end state against an uninterrupted run. Model calls are counted by
observers the program does not control: in fake mode a wrapper that loads durable_job.py unchanged and
logs every call into the fake provider (plus the journal's call_events) — a launcher for a command that is
to crash or race, the same wrapper in this process for any other — in openai mode the loopback server's own
request log.
"""

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import durable_job
from conftest import BOTH, PROGRAM, Provider, Workspace, assert_held, kill_group, new_store, openai_workspace, wait_for

BUSY = ("State directory busy", "another durable_job command")

###############################################################################
# The observer: durable_job.py loaded unchanged, its fake provider watched from outside
###############################################################################

OBSERVER = r'''
"""Run durable_job.py unchanged, logging every call into the fake provider; optionally wait at a barrier."""
import importlib.util, json, os, sys, time

PROGRAM = {program!r}
spec = importlib.util.spec_from_file_location("durable_job", PROGRAM)
dj = importlib.util.module_from_spec(spec)
sys.modules["durable_job"] = dj
spec.loader.exec_module(dj)


def note(record):
    path = os.environ.get("FAULTS_CALL_LOG")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


real_fake_call = dj.fake_call


def observed_fake_call(job, item, source, prompt, instructions):
    key = dj._OPERATION_KEY.get()  # the key of the call being made: fake_call is not given it, and no public name holds it
    note({{"event": "request", "key": key, "item": item["id"], "pid": os.getpid()}})
    output_text, response_id, request_id, usage = real_fake_call(job, item, source, prompt, instructions)
    note({{"event": "answer", "key": key, "item": item["id"], "outputText": output_text,
           "responseId": response_id, "requestId": request_id}})
    return output_text, response_id, request_id, usage


dj.fake_call = observed_fake_call

hold = float(os.environ.get("FAULTS_HOLD_LOCK") or 0)
if hold:  # a slow machine: whoever takes run.lock keeps it a while longer
    def hold_longer(lock_class):
        real_enter = lock_class.__enter__

        def slow_enter(self):
            entered = real_enter(self)
            time.sleep(hold)
            return entered

        lock_class.__enter__ = slow_enter

    hold_longer(dj.RunLock)
    hold_longer(importlib.import_module("durable_job_team.store").PgLock)

pause = os.environ.get("FAULTS_PAUSE_BEFORE")
if pause:  # the scheduler stops this process just before the named step, until the test says go
    name, folder = pause.split(":", 1)
    real_step = getattr(dj, name)

    def paused_step(*args, **kwargs):
        open(os.path.join(folder, "paused"), "w").close()
        while not os.path.exists(os.path.join(folder, "go")):
            time.sleep(0.005)
        return real_step(*args, **kwargs)

    setattr(dj, name, paused_step)

barrier = os.environ.get("FAULTS_BARRIER")
if barrier:
    open(os.path.join(barrier, "ready.%d" % os.getpid()), "w").close()
    go = os.path.join(barrier, "go")
    while not os.path.exists(go):
        time.sleep(0.001)

sys.exit(dj.main(sys.argv[1:]))
'''


class Observer:
    """A launcher for durable_job.py whose fake-provider calls land in a log the program never reads."""

    def __init__(self, root):
        self.root = str(root)
        self.program = os.path.join(self.root, "observed_durable_job.py")
        self.log = os.path.join(self.root, "fake-provider.log")
        with open(self.program, "w", encoding="utf-8") as fh:
            fh.write(OBSERVER.format(program=PROGRAM))

    def env(self, **extra) -> dict:
        return {"FAULTS_CALL_LOG": self.log, **extra}

    def records(self, event=None) -> list:
        if not os.path.exists(self.log):
            return []
        with open(self.log) as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        return [r for r in records if event is None or r["event"] == event]

    def run(self, ws: Workspace, *args, env=None, **kw):
        """A command watched as it runs: in a process of its own when it is to crash at a named point or wait at a barrier
        (or the workspace runs no command in this process); otherwise in this process (conftest.run_inprocess), with the
        same watch on durable_job.fake_call for as long as it runs (the module is the program, loaded unchanged)."""
        if ws.inprocess and not env and not kw:
            with self.watching():
                return ws.run(*args)
        return ws.run(*args, env=self.env(**(env or {})), program=self.program, **kw)

    @contextlib.contextmanager
    def watching(self):
        """Every fake-provider call durable_job makes meanwhile in this process, logged as the launcher logs it."""
        real_fake_call = durable_job.fake_call

        def note(record):
            with open(self.log, "a") as fh:
                fh.write(json.dumps(record) + "\n")

        def observed_fake_call(job, item, source, prompt, instructions):
            key = durable_job._OPERATION_KEY.get()  # as the launcher reads it: fake_call is not given its key
            note({"event": "request", "key": key, "item": item["id"], "pid": os.getpid()})
            output_text, response_id, request_id, usage = real_fake_call(job, item, source, prompt, instructions)
            note(
                {
                    "event": "answer",
                    "key": key,
                    "item": item["id"],
                    "outputText": output_text,
                    "responseId": response_id,
                    "requestId": request_id,
                }
            )
            return output_text, response_id, request_id, usage

        durable_job.fake_call = observed_fake_call
        try:
            yield
        finally:
            durable_job.fake_call = real_fake_call


###############################################################################
# Journal checks shared by every test
###############################################################################


def assert_journal_consistent(ws: Workspace, items: list, requests_per_key: Counter) -> list:
    """No duplicate or lost rows; one dispatch per key; a later attempt only after a recorded abandon
    (or a provider's definite refusal); every item ends with exactly one completed row.

    requests_per_key: what an outside observer saw reach the provider, per operation key.
    """
    rows, events = ws.calls(), ws.events()
    keys = [r["operation_key"] for r in rows]
    assert len(keys) == len(set(keys)), f"duplicate journal rows: {keys}"
    by_base = {}
    for r in rows:
        assert r["operation_key"] == f"{r['base_key']}:{r['attempt']}"
        by_base.setdefault(r["base_key"], []).append(r)
    dispatches = Counter(e["operation_key"] for e in events if e["event"] == "dispatch")
    assert set(dispatches) == set(keys), "every journal row has exactly its own dispatch event"
    assert max(dispatches.values(), default=0) <= 1, f"a key was dispatched twice: {dispatches}"
    for key, n in requests_per_key.items():
        assert n <= 1, f"operation {key} reached the provider {n} times"
        assert key in keys, f"the provider saw {key}, which the journal never recorded"
    event_id = {(e["operation_key"], e["event"]): e["id"] for e in events}
    for attempts in by_base.values():
        attempts.sort(key=lambda r: r["attempt"])
        assert [r["attempt"] for r in attempts] == list(range(1, len(attempts) + 1)), f"lost or skipped attempt: {attempts}"
        for earlier, later in itertools.pairwise(attempts):
            assert earlier["status"] in ("abandoned", "rejected"), f"attempt {later['attempt']} after a {earlier['status']} one"
            if earlier["status"] == "abandoned":
                record = json.loads(earlier["reconciliation_json"])
                assert record["action"] == "abandon" and record["reviewer"]
                assert event_id[(earlier["operation_key"], "reconciled")] < event_id[(later["operation_key"], "dispatch")], (
                    "a second attempt was dispatched before the abandon was recorded"
                )
    completed = Counter(r["item_id"] for r in rows if r["status"] == "completed")
    assert completed == Counter(items), f"each item needs exactly one completed call, journal has {dict(completed)}"
    assert not any(r["status"] == "pending" for r in rows)
    return rows


def status_calls(ws: Workspace) -> list:
    return ws.run("status").ok()["calls"]


###############################################################################
# The uninterrupted run every faulted run must match
###############################################################################


@pytest.fixture(scope="module")
def fake_baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("baseline")
    ws = Workspace(root)
    ws.write_manifest()
    obs = Observer(root)
    out = obs.run(ws, "start", "--manifest", ws.manifest).ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "baseline", "--reason", "uninterrupted").ok()
    inspect = ws.run("inspect").ok()
    assert decided["final"]["resultsSha256"] == inspect["resultsSha256"]
    assert len(obs.records("request")) == 2
    return {
        "resultsSha256": inspect["resultsSha256"],
        "results": inspect["results"],
        "statuses": inspect["final"]["statuses"],
        "decision": "accept",
    }


###############################################################################
# Named crash points, table-driven
###############################################################################

# point → (command that reaches it, journal statuses right after the crash, phase `status` reports)
CRASH_TABLE = {
    "after-seal": ("start", [], "not-started"),
    "after-pending": ("start", ["pending"], "uncertain-call"),
    "before-ledger": ("start", ["pending"], "uncertain-call"),
    "after-ledger": ("start", ["completed"], "ready"),
    "after-validate": ("start", ["completed"], "ready"),
    "before-review": ("start", ["completed", "completed"], "ready"),
    "after-decision-row": ("decide", ["completed", "completed"], "deciding"),
    "after-decide": ("decide", ["completed", "completed"], "decided"),
    "after-reconcile": ("reconcile", ["abandoned"], "ready"),
}
# (point, what the person does with a pending row): abandon, or complete from the provider's record
CRASH_CASES = [(point, "abandon") for point in CRASH_TABLE] + [("before-ledger", "complete")]


PRUNE_POINTS = {"after-prune-mark", "after-prune-delete"}  # a prune killed there: tests/test_lasting.py, both backends
SHRED_POINTS = {"before-shred", "in-shred", "after-shred"}  # a shred killed there: tests/test_encrypted.py
# the writer's call killed there (a real SIGKILL, openai mode, both backends): tests/test_writer.py
WRITER_POINTS = {"writer-after-pending", "writer-before-ledger", "writer-after-ledger", "after-write"}
FORK_POINTS = {"after-fork-seal", "after-fork-record", "after-reuse"}  # a fork's: tests/test_fork.py kills it at each


def test_crash_table_covers_every_named_point_with_a_distinct_exit_code():
    assert set(CRASH_TABLE) | PRUNE_POINTS | SHRED_POINTS | WRITER_POINTS | FORK_POINTS == set(durable_job.CRASH_POINTS)
    codes = list(durable_job.CRASH_POINTS.values())
    assert len(set(codes)) == len(codes), "every crash point needs its own exit code"
    assert not {0, 1, 2} & set(codes), "crash codes must not look like success, a Python error or a HOLD"
    assert durable_job.CRASH_POINTS["before-ledger"] == 91 and durable_job.CRASH_POINTS["after-ledger"] == 92


def crash(result, point: str) -> None:
    """The process died at the point: its exit code, nothing printed, no traceback."""
    assert result.code == durable_job.CRASH_POINTS[point], f"exit {result.code}\n{result.stdout}\n{result.stderr}"
    assert result.stdout == "", "a crashed command must not have printed a result"
    assert "Traceback" not in result.stderr


def reach_crash(ws: Workspace, obs: Observer, point: str) -> None:
    command = CRASH_TABLE[point][0]
    at = {"DURABLE_JOB_FAKE_CRASH": point}
    if command == "start":
        crash(obs.run(ws, "start", "--manifest", ws.manifest, env=at), point)
    elif command == "decide":
        obs.run(ws, "start", "--manifest", ws.manifest).ok()
        crash(ws.run("decide", "--decision", "accept", "--reviewer", "rev", "--reason", "looks right", env=at), point)
    else:  # reconcile: first a pending row, then a kill inside the reconcile that abandons it
        crash(obs.run(ws, "start", "--manifest", ws.manifest, env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}), "after-pending")
        ((key, *_),) = status_calls(ws)
        crash(
            ws.run(
                "reconcile",
                "--operation-key",
                key,
                "--action",
                "abandon",
                "--reviewer",
                "rev",
                "--reason",
                "never sent: killed before the request",
                env=at,
            ),
            point,
        )


def runbook(ws: Workspace, obs: Observer, strategy: str, point: str) -> dict:
    """What the README's recovery runbook tells a person to do; returns the final decide/resume output."""
    status = ws.run("status").ok()
    pending = [c for c in status["calls"] if c[2] == "pending"]
    if pending:
        # resuming first is refused by name, and sends nothing
        key, item = pending[0][0], pending[0][1]
        before = (ws.calls(), len(obs.records()))
        obs.run(ws, "resume").held(f"UNCERTAIN_CALL {item} {key}")
        assert (ws.calls(), len(obs.records())) == before
    for key, _item, *_ in pending:
        if strategy == "complete":
            (answer,) = [r for r in obs.records("answer") if r["key"] == key]
            response = os.path.join(ws.root, "response.json")
            with open(response, "w") as fh:
                json.dump({"outputText": answer["outputText"], "responseId": answer["responseId"], "requestId": answer["requestId"]}, fh)
            out = ws.run(
                "reconcile",
                "--operation-key",
                key,
                "--action",
                "complete",
                "--reviewer",
                "rev",
                "--reason",
                "the provider's record shows its answer",
                "--response-file",
                response,
            ).ok()
            assert out["status"] == "completed"
        else:
            out = ws.run(
                "reconcile",
                "--operation-key",
                key,
                "--action",
                "abandon",
                "--reviewer",
                "rev",
                "--reason",
                "no provider record can settle it",
            ).ok()
            assert out["status"] == "abandoned"
    if point == "after-reconcile":
        # the person cannot know whether the killed reconcile took: running it again is refused, harmlessly
        ((key, _, row_status, *_),) = status["calls"]
        assert row_status == "abandoned"
        ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "rev", "--reason", "again").held(
            "cannot be reconciled", "it is abandoned"
        )
    if point == "after-decision-row":
        # the journal holds the decision, the thread not yet: no other decision or cancel is taken, resume records it
        assert ws.run("status").ok()["phase"] == "deciding" and ws.receipt() is None
        ws.run("decide", "--decision", "reject", "--reviewer", "other", "--reason", "second try").held("a decision is already saved")
        ws.run("cancel", "--reviewer", "other", "--reason", "r").held("a decision is already saved")
        out = obs.run(ws, "resume").ok()
        assert out["final"]["decision"] == "accept" and out["final"]["reviewer"] == "rev" and ws.receipt() is not None
        return out
    if point == "after-decide":
        # the decision is recorded: a second decide is refused, resume repairs the missing receipt
        assert ws.receipt() is None
        ws.run("decide", "--decision", "reject", "--reviewer", "other", "--reason", "second try").held("Final decision already recorded")
        out = obs.run(ws, "resume").ok()
        assert ws.receipt() is not None, "resume on a decided job must write the missing receipt.json"
        assert out["final"]["decision"] == "accept" and out["interrupt"] == []
        return out
    out = obs.run(ws, "resume").ok()
    assert len(out["interrupt"]) == 1 and out["final"] is None
    assert ws.receipt() is None
    return ws.run("decide", "--decision", "accept", "--reviewer", "rev", "--reason", "looks right").ok()


def assert_end_state(ws: Workspace, obs: Observer, baseline: dict, final_out: dict) -> None:
    inspect = ws.run("inspect").ok()
    assert inspect["resultsSha256"] == baseline["resultsSha256"]
    assert inspect["results"] == baseline["results"]
    final = inspect["final"]
    assert final["decision"] == baseline["decision"] and final["reviewer"] == "rev"
    assert final["resultsSha256"] == baseline["resultsSha256"] and final["statuses"] == baseline["statuses"]
    assert final_out["final"] == final
    receipt = ws.receipt()
    assert receipt["final"] == final and receipt["resultsSha256"] == baseline["resultsSha256"]
    assert ws.run("verify").ok()["ok"] is True
    ws.run("decide", "--decision", "hold", "--reviewer", "late", "--reason", "again").held("Final decision already recorded")
    requests = Counter(r["key"] for r in obs.records("request"))
    rows = assert_journal_consistent(ws, ["alpha", "beta"], requests)
    answers = {r["key"]: r for r in obs.records("answer")}
    for row in rows:
        if row["status"] == "completed":  # by the program or by reconcile: exactly what the provider answered
            answer = answers[row["operation_key"]]
            assert (row["output_text"], row["response_id"], row["request_id"]) == (
                answer["outputText"],
                answer["responseId"],
                answer["requestId"],
            )
    abandoned = sum(r["status"] == "abandoned" for r in rows)
    assert sum(requests.values()) <= len(baseline["statuses"]) + abandoned


@BOTH
@pytest.mark.parametrize("point,strategy", CRASH_CASES, ids=[f"{p}-{s}" for p, s in CRASH_CASES])
def test_kill_at_each_crash_point_then_runbook_recovery_matches_uninterrupted_run(tmp_path, ws, fake_baseline, point, strategy):
    obs = Observer(tmp_path)
    reach_crash(ws, obs, point)
    _, statuses, phase = CRASH_TABLE[point]
    status = ws.run("status").ok()
    assert [c[2] for c in status["calls"]] == statuses
    assert status["phase"] == phase
    if point == "after-seal":
        assert ws.has_job()
    if point == "before-ledger":  # the fake provider answered; the journal still says pending
        assert [r["key"] for r in obs.records("answer")] == [status["calls"][0][0]]
    if point in ("after-pending", "after-reconcile"):  # killed before the request: nothing reached the provider
        assert obs.records() == []
    final_out = runbook(ws, obs, strategy, point)
    assert_end_state(ws, obs, fake_baseline, final_out)
    rows = ws.calls()
    if statuses == ["pending"] or point == "after-reconcile":
        expected = ["completed", "completed"] if strategy == "complete" else ["abandoned", "completed", "completed"]
        assert [r["status"] for r in rows] == expected
        if strategy == "abandon":
            assert [r["attempt"] for r in rows] == [1, 2, 1]
    else:  # nothing uncertain: exactly the two calls of an uninterrupted run, never repeated
        assert [(r["status"], r["attempt"]) for r in rows] == [("completed", 1), ("completed", 1)]
        assert len(obs.records("request")) == 2


def test_crash_points_are_ignored_in_openai_mode(ws, provider):
    openai_workspace(ws, provider)
    for n, point in enumerate(("after-seal", "before-ledger")):
        ws.state = os.path.join(ws.root, f"state-{point}")
        out = ws.start(env={"DURABLE_JOB_FAKE_CRASH": point}).ok()
        assert len(out["interrupt"]) == 1
        assert [c[2] for c in status_calls(ws)] == ["completed", "completed"]
        assert len(provider.requests()) == 2 * (n + 1)
    out = ws.run("decide", "--decision", "hold", "--reviewer", "rev", "--reason", "x", env={"DURABLE_JOB_FAKE_CRASH": "after-decide"}).ok()
    assert out["final"]["decision"] == "hold"


###############################################################################
# A decide killed inside LangGraph's own saving steps
###############################################################################

# No crash point inside durable_job.py sits between LangGraph's writes, so this launcher (durable_job.py
# loaded unchanged) ends the process right after the checkpointer saved the write the test names:
# Command's resume value, the review task's own copy of it, or the review node's `final` write (its
# checkpoint not yet saved).
LOAD_THE_PROGRAM = r"""
import contextlib, importlib.util, os, signal, sys, time

spec = importlib.util.spec_from_file_location("durable_job", {program!r})
dj = importlib.util.module_from_spec(spec)
sys.modules["durable_job"] = dj
spec.loader.exec_module(dj)
"""  # a launcher's head: durable_job.py loaded unchanged, as `dj`
KILL_INSIDE_LANGGRAPH = (
    LOAD_THE_PROGRAM
    + r'''
from langgraph.checkpoint.sqlite import SqliteSaver

when = os.environ["KILL_AFTER_WRITE"]
real_put_writes = SqliteSaver.put_writes


def put_writes(self, config, writes, task_id, task_path=""):
    real_put_writes(self, config, writes, task_id, task_path)
    channels = {{channel for channel, value in writes if value is not None}}
    null_task = task_id.startswith("00000000-")
    if (when == "resume-value" and "__resume__" in channels and null_task
            or when == "task-resume" and "__resume__" in channels and not null_task
            or when == "final-write" and "final" in channels):
        time.sleep(0.2)  # widen the window a background checkpoint save would need: the gate below must close it
        os._exit(99)


SqliteSaver.put_writes = put_writes
real_put = SqliteSaver.put


def put(self, config, checkpoint, metadata, new_versions):
    # LangGraph saves a task's writes and the next checkpoint on background threads, in no fixed order:
    # without this gate the checkpoint holding `final` could be saved between the named write and the
    # kill, and the decide would have finished after all. Hold every checkpoint of this decide until the
    # kill (a minute at most, should the named write never come: then the exit code tells).
    if when in ("resume-value", "task-resume", "final-write"):
        time.sleep(60)
    return real_put(self, config, checkpoint, metadata, new_versions)


SqliteSaver.put = put
real_cursor = SqliteSaver.cursor


class DiesBetweenRows:
    """A cursor whose executemany of an item step's writes (its results and the branch to the next) dies after all
    but the last row."""

    def __init__(self, cur):
        self.cur = cur

    def __getattr__(self, name):
        return getattr(self.cur, name)

    def __iter__(self):
        return iter(self.cur)

    def executemany(self, query, rows):
        rows = list(rows)
        channels = {{row[6] for row in rows if len(row) > 6}}
        if when == "between-write-rows" and "results" in channels and any(c.startswith("branch:to:") for c in channels):
            for row in rows[:-1]:
                self.cur.execute(query, row)
            os._exit(99)
        return self.cur.executemany(query, rows)


@contextlib.contextmanager
def cursor(self, transaction=True):
    with real_cursor(self, transaction) as cur:
        yield DiesBetweenRows(cur)


SqliteSaver.cursor = cursor
sys.exit(dj.main(sys.argv[1:]))
'''
)


def lose_checkpoints(state: str, keep: int) -> None:
    """What a power cut may do to the item runs' checkpoints (saved without waiting for the disk): the newest ones
    gone, each whole, keeping the first `keep` (0: none)."""
    import sqlite3

    with sqlite3.connect(os.path.join(state, "effects.sqlite")) as conn:
        ids = [r[0] for r in conn.execute("SELECT checkpoint_id FROM checkpoints ORDER BY checkpoint_id")]
        for table in ("writes", "checkpoints"):
            conn.execute(f"DELETE FROM {table} WHERE checkpoint_id >= ?", (ids[keep],))


def test_checkpoints_a_power_cut_takes_are_run_again_from_the_journal_and_nothing_is_sent_twice(tmp_path, provider):
    """A run of the items saves its checkpoints without waiting for the disk (the journal's rows are what it waits
    for): after a power cut the job stands at an earlier step, and the next run finds every answer in the journal."""
    ws = openai_workspace(Workspace(tmp_path / "job"), provider)
    first = ws.start().ok()
    sent = len(provider.requests())
    assert sent == 2 and first["interrupt"]
    for keep in (2, 0):  # the review's checkpoint lost; then every checkpoint, the input's included
        lose_checkpoints(ws.state, keep)
        assert ws.run("status").ok()["phase"] != "awaiting-review"
        again = ws.run("resume").ok()
        assert again["interrupt"] and again["results"] == first["results"], again
        assert len(provider.requests()) == sent  # nothing sent again
    digest = ws.run("inspect").ok()["resultsSha256"]
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "after a power cut", "--results-sha256", digest).ok()
    assert ws.run("verify").ok()["ok"] is True


def test_a_kill_between_the_rows_of_one_tasks_writes_never_ends_the_graph_short(ws, tmp_path):
    """LangGraph stores a task's writes with one executemany: only a transaction makes that all-or-nothing.
    Killed between its rows, the next run must still reach the review, with every call made once."""
    killer = os.path.join(str(tmp_path), "kill_inside_langgraph.py")
    with open(killer, "w", encoding="utf-8") as fh:
        fh.write(KILL_INSIDE_LANGGRAPH.format(program=PROGRAM))
    assert ws.start(program=killer, env={"KILL_AFTER_WRITE": "between-write-rows"}).code == 99
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"] and len(out["interrupt"]) == 1
    assert [(r[1], r[2], r[3]) for r in ws.db_rows()] == [("alpha", "completed", 1), ("beta", "completed", 1)]
    assert ws.run("verify").ok()["ok"] is True


# A new state directory's journal is made in a private file and linked to its name (durable_job.make_ledger): this
# launcher SIGKILLs the process just before that link, or just after it (its folder not yet fsynced).
KILL_WHILE_MAKING_THE_JOURNAL = (
    LOAD_THE_PROGRAM
    + r"""
when = os.environ["KILL_WHEN"]
real_link = os.link


def link(src, dst, *args, **kwargs):
    made = str(dst).endswith("effects.sqlite")
    if made and when == "before-link":
        os.kill(os.getpid(), signal.SIGKILL)
    real_link(src, dst, *args, **kwargs)
    if made and when == "after-link":
        os.kill(os.getpid(), signal.SIGKILL)


os.link = link
sys.exit(dj.main(sys.argv[1:]))
"""
)


@pytest.mark.parametrize("when", ["before-link", "after-link"])
def test_a_start_killed_while_its_journal_is_made_leaves_none_or_the_whole_one(ws, tmp_path, when):
    killer = os.path.join(str(tmp_path), "kill_while_making_the_journal.py")
    with open(killer, "w", encoding="utf-8") as fh:
        fh.write(KILL_WHILE_MAKING_THE_JOURNAL.format(program=PROGRAM))
    assert ws.start(program=killer, env={"KILL_WHEN": when}).code == -signal.SIGKILL
    names = os.listdir(ws.state)
    assert ("effects.sqlite" in names) == (when == "after-link")
    assert len([n for n in names if n.startswith(".effects.sqlite.") and n.endswith(".tmp")]) == 1  # the private file, left
    assert ws.run("status").ok()["phase"] == "not-started"
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"] and len(out["interrupt"]) == 1
    assert not [n for n in os.listdir(ws.state) if n.endswith(".tmp")]  # the leftover went with the next make
    assert [(r[1], r[2], r[3]) for r in ws.db_rows()] == [("alpha", "completed", 1), ("beta", "completed", 1)]
    assert ws.run("verify").ok()["ok"] is True


@pytest.mark.parametrize("when", ["resume-value", "task-resume", "final-write"])
def test_a_decision_saved_by_a_killed_decide_is_shown_kept_and_finished_by_resume(ws, tmp_path, when):
    """LangGraph applies a saved resume value on the thread's next run: so that decision stands, and says so."""
    killer = os.path.join(str(tmp_path), "kill_inside_langgraph.py")
    with open(killer, "w", encoding="utf-8") as fh:
        fh.write(KILL_INSIDE_LANGGRAPH.format(program=PROGRAM))
    ws.start().ok()
    alice = ("decide", "--decision", "accept", "--reviewer", "alice", "--reason", "first look")
    assert ws.run(*alice, program=killer, env={"KILL_AFTER_WRITE": when}).code == 99
    assert not os.path.exists(os.path.join(ws.state, "receipt.json"))

    status = ws.run("status").ok()
    assert status["phase"] == "deciding"
    assert "accept by alice" in status["next"] and "resume --state-dir" in status["next"]
    seen = ws.run("inspect").ok()
    assert seen["final"] is None and "decideCommand" not in seen
    assert (seen["savedDecision"]["decision"], seen["savedDecision"]["reviewer"]) == ("accept", "alice")
    page = os.path.join(str(tmp_path), "review.html")
    assert "saved, not yet finished: accept by alice" in ws.run("inspect", "--text", "--html", page).stdout
    with open(page, encoding="utf-8") as fh:
        assert "A decision was saved, but the decide that saved it stopped before it finished." in fh.read()

    # a second reviewer cannot be silently overridden by the saved decision, nor override it
    bob = ("--reviewer", "bob", "--reason", "second look")
    ws.run("decide", "--decision", "reject", *bob, "--results-sha256", seen["resultsSha256"]).held(
        "Cannot decide", "accept by alice", "resume --state-dir"
    )
    ws.write_source("summary.txt", "A new summary for alpha.")
    ws.run("revise", "--item", "alpha", "--summary-file", os.path.join(ws.src, "summary.txt"), *bob).held("Cannot revise", "alice")
    ws.run("cancel", *bob).held("Cannot cancel", "alice")
    assert ws.run("inspect").ok() == seen  # the refusals changed nothing

    finished = ws.run("resume").ok()
    assert (finished["final"]["decision"], finished["final"]["reviewer"], finished["final"]["reason"]) == ("accept", "alice", "first look")
    with open(os.path.join(ws.state, "receipt.json")) as fh:
        assert json.load(fh)["final"] == finished["final"]
    assert ws.run("status").ok()["phase"] == "decided"
    assert ws.run("verify").ok()["ok"] is True
    ws.run("decide", "--decision", "reject", *bob).held("Final decision already recorded", "alice")


###############################################################################
# Random SIGKILLs over real HTTP
###############################################################################

FUZZ_BEHAVIOUR = "slow:0.3"


def fuzz_size() -> int:
    raw = os.environ.get("DURABLE_JOB_FUZZ_JOBS", "")
    return int(raw) if raw.strip() else 3


class FuzzJob:
    """One openai-mode job driven through random kills by a careful person."""

    def __init__(
        self, root, n: int, seed: int, duration: float, baseline: dict, max_kills: int = 3, concurrency: int = 1, store=None, api=None
    ):
        os.makedirs(root, exist_ok=True)
        self.n = n
        self.rng = random.Random(seed)
        self.duration = duration
        self.baseline = baseline
        self.max_kills = max_kills
        self.provider = Provider(root)
        self.provider.behave(FUZZ_BEHAVIOUR)
        # a killed client leaves the server writing into a closed socket: expected here, not worth a printout
        self.provider.server.handle_error = lambda request, client_address: None
        # each start and resume a real process (popen) a real SIGKILL may end; what the careful person runs between them
        # (status, reconcile, decide, inspect, verify) runs in-process, one command at a time (conftest.run_inprocess)
        self.ws = Workspace(root, store=store)
        openai_workspace(self.ws, self.provider, jobId=f"fuzz-{n}", maxConcurrentCalls=concurrency, **api_keys(api))
        self.counts = Counter()
        self.transcript = []

    def note(self, text):
        self.transcript.append(text)

    def check_output(self, out: str, err: str) -> None:
        assert "Traceback" not in out + err, f"job {self.n}: a traceback was printed:\n{err}"

    def pending_rows(self) -> int:
        import sqlite3

        if self.ws.store:
            try:
                return len(self.ws.journal("SELECT operation_key FROM calls WHERE status='pending'"))
            except Exception:  # no job row yet
                return 0

        path = os.path.join(self.ws.state, "effects.sqlite")
        if not os.path.exists(path):
            return 0
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05)
            try:
                return conn.execute("SELECT count(*) FROM calls WHERE status='pending'").fetchone()[0]
            finally:
                conn.close()
        except sqlite3.Error:
            return 0

    def server_log_size(self) -> int:
        try:
            return os.path.getsize(self.provider.log)
        except FileNotFoundError:
            return 0

    def kill_plan(self):
        """When to kill: at a uniform instant of the whole run, or a random moment after the server
        received a request (answer in flight), or just after a pending row was committed."""
        if self.counts["kills"] >= self.max_kills or self.rng.random() < 0.2:
            return None
        anchor = self.rng.choice(["uniform", "uniform", "server", "server", "pending"])
        if anchor == "pending" and self.counts["kills_pending"]:
            anchor = "server"  # one aimed kill into the uncertain window per job: two would use up an item's attempts
        if anchor == "uniform":
            return anchor, self.rng.uniform(0.0, self.duration * 1.1)
        if anchor == "server":
            return anchor, self.rng.uniform(0.0, 0.45)
        return anchor, self.rng.uniform(0.0, 0.05)

    def launch(self) -> tuple[int | None, str, str, bool]:
        """Run start or resume, maybe SIGKILLing it at a random instant; (code, stdout, stderr, killed)."""
        if not self.ws.has_job():
            args = ("start", "--manifest", self.ws.manifest)
        else:  # a person re-runs either: start on the same job continues as resume
            args = ("resume",) if self.rng.random() < 0.7 else ("start", "--manifest", self.ws.manifest)
        plan = self.kill_plan()
        log_size = self.server_log_size()
        proc = self.ws.popen(*args)
        began = time.monotonic()
        killed = False
        if plan is not None:
            anchor, delay = plan
            deadline = time.monotonic() + 120
            if anchor == "server":
                while proc.poll() is None and self.server_log_size() == log_size and time.monotonic() < deadline:
                    time.sleep(0.003)
            elif anchor == "pending":
                while proc.poll() is None and not self.pending_rows() and time.monotonic() < deadline:
                    time.sleep(0.003)
            try:
                proc.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                killed = proc.returncode == -signal.SIGKILL
        out, err = proc.communicate(timeout=120)
        self.check_output(out, err)
        self.counts["launches"] += 1
        if killed:
            self.counts["kills"] += 1
            self.counts[f"kills_{plan[0]}"] += 1
        shown = ""
        if proc.returncode == 0:  # what the run says it reached
            try:
                doc = json.loads(out)
                shown = f"index={doc.get('index')} results={len(doc.get('results') or [])} interrupt={len(doc.get('interrupt') or [])}"
            except ValueError:
                shown = f"stdout not JSON: {out[:80]!r}"
        self.note(
            f"{args[0]} plan={plan and (plan[0], round(plan[1], 3))} after {time.monotonic() - began:.2f}s -> "
            f"{'KILLED' if killed else proc.returncode} {shown}{err.strip()[:160]}"
        )
        return proc.returncode, out, err, killed

    def recover(self) -> None:
        """status; every pending row: complete from the server's log if it answered, else abandon."""
        if not self.ws.has_job():
            self.ws.run("status").held("No job")  # killed before the seal: the person simply starts again
            return
        time.sleep(0.25)  # bytes already sent by the killed process still reach the server
        status = self.ws.run("status")
        self.check_output(status.stdout, status.stderr)
        logged = {r["client_request_id"]: r for r in self.provider.requests()}
        for key, item, row_status, *_ in status.ok()["calls"]:
            if row_status != "pending":
                continue
            record = logged.get(key)
            if record is not None and record["response_id"]:
                response = self.provider.response_file(record, os.path.join(self.ws.root, f"response-{key[:12]}.json"))
                r = self.ws.run(
                    "reconcile",
                    "--operation-key",
                    key,
                    "--action",
                    "complete",
                    "--reviewer",
                    "fuzz",
                    "--reason",
                    "server log shows the answer",
                    "--response-file",
                    response,
                )
                self.counts["completed_from_log"] += 1
            else:
                r = self.ws.run(
                    "reconcile",
                    "--operation-key",
                    key,
                    "--action",
                    "abandon",
                    "--reviewer",
                    "fuzz",
                    "--reason",
                    "server log never received it",
                )
                self.counts["abandoned"] += 1
            self.check_output(r.stdout, r.stderr)
            r.ok()
            self.note(f"reconcile {item} {key[-14:]} -> {r.json['status']}")

    def drive(self) -> Counter:
        try:
            return self.drive_to_review()
        finally:
            self.provider.stop()

    def drive_to_review(self) -> Counter:
        for _ in range(40):
            code, out, err, killed = self.launch()
            if not killed and code == 0:
                # every allowed attempt of an item lost in the uncertain window: it reaches review as failed
                exhausted = [r for r in self.ws.run("inspect").ok()["results"] if durable_job.NO_CALL_LEFT in r.get("reason", "")]
                if exhausted:
                    self.counts["exhausted"] += 1
                    return self.finish(exhausted=True)
                break
            if not killed:
                raise AssertionError(f"job {self.n}: unexpected refusal {err.strip()}\n" + "\n".join(self.transcript))
            self.recover()
        else:
            raise AssertionError(f"job {self.n} never finished:\n" + "\n".join(self.transcript))
        return self.finish(exhausted=False)

    def finish(self, exhausted: bool) -> Counter:
        ws, log = self.ws, self.provider.requests()
        per_key = Counter(r["client_request_id"] for r in log)
        assert None not in per_key, "every provider request carries X-Client-Request-Id"
        rows = ws.calls()
        if exhausted:  # legitimate only when an item lost both allowed attempts in the uncertain window
            lost = Counter(r["item_id"] for r in rows if r["status"] == "abandoned")
            assert max(lost.values(), default=0) == 2, "\n".join(self.transcript)
            for key, n in per_key.items():
                assert n <= 1 and key in {r["operation_key"] for r in rows}
            ws.run("decide", "--decision", "accept", "--reviewer", "fuzz", "--reason", "x").held("Cannot accept")
            ws.run("decide", "--decision", "reject", "--reviewer", "fuzz", "--reason", "an item got no proposal").ok()
            assert ws.run("verify").ok()["ok"] is True
        else:
            decide = ws.run("decide", "--decision", "accept", "--reviewer", "fuzz", "--reason", "recovered")
            assert decide.code == 0, f"job {self.n}: {decide.stderr}\n" + "\n".join(self.transcript)
            decided = decide.json
            inspect = ws.run("inspect").ok()
            assert inspect["resultsSha256"] == self.baseline["resultsSha256"], "\n".join(self.transcript)
            assert inspect["results"] == self.baseline["results"]
            assert decided["final"]["resultsSha256"] == self.baseline["resultsSha256"]
            assert ws.run("verify").ok()["ok"] is True
            rows = assert_journal_consistent(ws, ["alpha", "beta"], per_key)
        by_key = {r["client_request_id"]: r for r in log}
        for row in rows:
            if row["status"] == "completed":  # exactly what the server sent
                sent = by_key[row["operation_key"]]
                assert (row["output_text"], row["response_id"], row["request_id"]) == (
                    sent["output_text"],
                    sent["response_id"],
                    f"req_{sent['seq']}",
                )
        self.counts["server_calls"] += len(log)
        self.counts["journal_rows"] += len(rows)
        self.counts["max_calls_per_key"] = max(per_key.values(), default=0)
        self.counts["jobs"] += 1
        return self.counts


def api_keys(api) -> dict:
    """The manifest's key for a job's provider API: none for the Responses API (the default), else {"api": api}."""
    return {} if api is None else {"api": api}


@pytest.fixture(scope="module")
def openai_baselines(tmp_path_factory):
    """The uninterrupted run of each provider API, made once for the module: its results depend on neither the backend
    nor maxConcurrentCalls, so the six random-kill journeys share two (made as each API is first asked for)."""
    made: dict = {}

    def baseline(api=None) -> tuple[dict, float]:
        if api not in made:
            made[api] = openai_baseline(tmp_path_factory.mktemp(f"baseline-{api or 'responses'}"), api)
        return made[api]

    return baseline


def openai_baseline(root, api=None) -> tuple[dict, float]:
    """An uninterrupted openai-mode run with the same latency: its results and how long start took."""
    os.makedirs(root, exist_ok=True)
    provider = Provider(root)
    try:
        provider.behave(FUZZ_BEHAVIOUR)
        ws = openai_workspace(Workspace(root, inprocess=False), provider, jobId="fuzz-baseline", **api_keys(api))  # timed as a process
        began = time.monotonic()
        ws.start().ok()
        duration = time.monotonic() - began
        ws.run("decide", "--decision", "accept", "--reviewer", "fuzz", "--reason", "uninterrupted", inprocess=True).ok()
        inspect = ws.run("inspect", inprocess=True).ok()
        assert len(provider.requests()) == 2
        return {"resultsSha256": inspect["resultsSha256"], "results": inspect["results"]}, duration
    finally:
        provider.stop()


@pytest.mark.parametrize(
    "concurrency,backend,api",
    [(1, "dir", None), (3, "dir", None), (1, "store", None), (3, "store", None), (1, "dir", "chat"), (3, "store", "chat")],
    ids=[
        "sequential",
        "maxConcurrentCalls-3",
        "store-sequential",
        "store-maxConcurrentCalls-3",
        "chat-sequential",
        "store-chat-maxConcurrentCalls-3",
    ],
)
def test_random_kills_over_real_http(tmp_path, request, openai_baselines, concurrency, backend, api):
    """Results never depend on prompts' progress lines here, so one baseline serves both concurrencies.

    In a store every job shares one database, as a team's jobs do. Chat Completions (api chat) is killed as the
    Responses API is, on both backends."""
    store = new_store(request.getfixturevalue("pg_server")) if backend == "store" else None
    jobs = fuzz_size()
    seed = int(os.environ.get("DURABLE_JOB_FUZZ_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"\ncrash-fuzz seed={seed} (rerun with DURABLE_JOB_FUZZ_SEED={seed})", flush=True)
    began = time.monotonic()
    baseline, duration = openai_baselines(api)
    workers = max(1, min(jobs, (os.cpu_count() or 2)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [
            pool.submit(
                lambda n=n: FuzzJob(
                    tmp_path / f"job{n}", n, seed + n, duration, baseline, concurrency=concurrency, store=store, api=api
                ).drive()
            )
            for n in range(jobs)
        ]
        counts = [f.result() for f in futures]
    total = sum(counts, Counter())
    total["max_calls_per_key"] = max(c["max_calls_per_key"] for c in counts)
    print(
        f"crash-fuzz summary: concurrency={concurrency} seed={seed} jobs={total['jobs']} launches={total['launches']} kills={total['kills']} "
        f"(uniform={total['kills_uniform']} after_server_got_request={total['kills_server']} after_pending={total['kills_pending']}) "
        f"completed_from_log={total['completed_from_log']} abandoned={total['abandoned']} "
        f"exhausted={total['exhausted']} server_calls={total['server_calls']} journal_rows={total['journal_rows']} "
        f"max_calls_per_key={total['max_calls_per_key']} tracebacks=0 seconds={time.monotonic() - began:.1f}",
        flush=True,
    )
    assert total["jobs"] == jobs and total["max_calls_per_key"] <= 1


###############################################################################
# Races: several commands launched together on one state directory
###############################################################################


def race(ws: Workspace, obs: Observer, commands: list, env=None, timeout=120, last=None) -> list:
    """Launch every command at one instant (a file barrier after start-up); return
    [(args, code, stdout, stderr, seconds from the go signal to exit)] in launch order. `last`, when given, is called
    once every command but one has ended (a provider holding the one left's calls answers them then)."""
    barrier = os.path.join(ws.root, f"barrier-{time.monotonic_ns()}")
    os.makedirs(barrier)
    procs = [ws.popen(*args, program=obs.program, env=obs.env(FAULTS_BARRIER=barrier, **(env or {}))) for args in commands]
    wait_for(lambda: len([n for n in os.listdir(barrier) if n.startswith("ready.")]) == len(procs), timeout=60)
    go = time.monotonic()
    open(os.path.join(barrier, "go"), "w").close()
    ended = {}
    while len(ended) < len(procs):
        for n, p in enumerate(procs):
            if n not in ended and p.poll() is not None:
                ended[n] = time.monotonic() - go
                if last is not None and len(ended) == len(procs) - 1:
                    last()
        assert time.monotonic() - go < timeout, "a racing command hung"
        time.sleep(0.002)
    out = []
    for n, (args, p) in enumerate(zip(commands, procs)):
        stdout, stderr = p.communicate()
        assert "Traceback" not in stdout + stderr
        out.append((args, p.returncode, stdout, stderr, ended[n]))
    return out


def split_race(results: list):
    """Exactly one command proceeded; every other was refused at once with the busy message."""
    busy = [r for r in results if r[1] == 2 and any(b in r[3] for b in BUSY)]
    others = [r for r in results if r not in busy]
    assert len(others) == 1, "exactly one command may proceed:\n" + "\n".join(f"{r[0][0]} exit {r[1]}: {r[3].strip()}" for r in results)
    winner = others[0]
    for args, _code, stdout, stderr, seconds in busy:
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("HOLD: BusyError: ") and stdout == ""
        assert seconds < winner[4], f"{args[0]} was refused only after {seconds:.2f}s, when the winner had finished"
    return winner, busy


@BOTH
@pytest.mark.parametrize("n", [2, 8])
def test_race_start_start_on_a_fresh_dir(ws, provider, tmp_path, n):
    openai_workspace(ws, provider)
    provider.behave("held")  # the winner's calls are answered once every other start has ended
    obs = Observer(tmp_path)
    results = race(ws, obs, [("start", "--manifest", ws.manifest)] * n, last=provider.release)
    winner, busy = split_race(results)
    # a state directory's start seals under the run lock; a store's commits the job's row and then takes its lock, so
    # on a loaded machine another start may take it in between and continue the job the first one sealed (which is then
    # refused busy): either way exactly one start proceeds and nothing is sent twice
    assert winner[1] == 0 and (json.loads(winner[2])["existing"] is False or ws.store is not None)
    log = provider.requests()
    per_key = Counter(r["client_request_id"] for r in log)
    assert len(log) == 2
    assert_journal_consistent(ws, ["alpha", "beta"], per_key)
    busy_phrase = f"Job {ws.job_id()} busy" if ws.store else "State directory busy"
    assert [r[3] for r in busy] and all(busy_phrase in r[3] for r in busy)
    # the state is whole: status, resume and decide go on as if only the winner had run
    assert [c[2] for c in status_calls(ws)] == ["completed", "completed"]
    assert ws.run("resume").ok()["interrupt"]
    ws.run("decide", "--decision", "accept", "--reviewer", "rev", "--reason", "ok").ok()
    assert len(provider.requests()) == 2


def test_race_start_start_when_the_seal_is_already_visible(ws, provider, tmp_path):
    """The losers may find job.json already sealed: then they continue as resume, which is busy too."""
    openai_workspace(ws, provider)
    provider.behave("held")  # the first start's calls are answered once the race is over: it holds the job till then
    obs = Observer(tmp_path)
    first = ws.popen("start", "--manifest", ws.manifest)
    wait_for(lambda: os.path.exists(os.path.join(ws.state, "job.json")), timeout=30)
    results = race(ws, obs, [("start", "--manifest", ws.manifest)] * 4)
    provider.release()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    for _args, code, stdout, stderr, _seconds in results:
        assert_held(code, stdout, stderr, *BUSY)
    log = provider.requests()
    assert len(log) == 2
    assert_journal_consistent(ws, ["alpha", "beta"], Counter(r["client_request_id"] for r in log))


def test_start_preempted_between_its_checks_while_another_start_seals(ws, provider, tmp_path):
    """A start that found no job.json, then lost the CPU while another start sealed one, is refused as busy
    (not told the directory "holds no job.json"), and no work is duplicated."""
    openai_workspace(ws, provider)
    provider.behave("held")  # the first start's calls are answered once the late one was refused: it holds the job till then
    obs = Observer(tmp_path)
    folder = os.path.join(ws.root, "pause")
    os.makedirs(folder)
    late = ws.popen(
        "start", "--manifest", ws.manifest, program=obs.program, env=obs.env(FAULTS_PAUSE_BEFORE=f"check_empty_state_dir:{folder}")
    )
    wait_for(lambda: os.path.exists(os.path.join(folder, "paused")), timeout=60)
    first = ws.popen("start", "--manifest", ws.manifest)
    wait_for(lambda: os.path.exists(os.path.join(ws.state, "job.json")), timeout=60)
    open(os.path.join(folder, "go"), "w").close()
    out, err = late.communicate(timeout=60)
    assert_held(late.returncode, out, err, *BUSY)
    provider.release()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    log = provider.requests()
    assert len(log) == 2
    assert_journal_consistent(ws, ["alpha", "beta"], Counter(r["client_request_id"] for r in log))


@BOTH
def test_race_resume_resume(ws, provider, tmp_path):
    openai_workspace(ws, provider)
    provider.behave("held", sequence=["429-quota"])  # the first call is refused: the job stops with work left
    ws.start().held("ProviderError", "rejected")
    obs = Observer(tmp_path)
    results = race(ws, obs, [("resume",)] * 4, last=provider.release)  # the winner's calls answered once the rest ended
    winner, busy = split_race(results)
    assert winner[1] == 0 and len(json.loads(winner[2])["interrupt"]) == 1
    log = provider.requests()
    per_key = Counter(r["client_request_id"] for r in log)
    assert len(log) == 3 and max(per_key.values()) == 1
    rows = assert_journal_consistent(ws, ["alpha", "beta"], per_key)
    assert [(r["item_id"], r["attempt"], r["status"]) for r in rows] == [
        ("alpha", 1, "rejected"),
        ("alpha", 2, "completed"),
        ("beta", 1, "completed"),
    ]


@BOTH
def test_race_decide_decide(ws, tmp_path, fake_baseline):
    obs = Observer(tmp_path)
    obs.run(ws, "start", "--manifest", ws.manifest).ok()
    decisions = ["accept", "reject", "hold", "accept", "reject", "hold"]
    commands = [("decide", "--decision", d, "--reviewer", f"reviewer{n}", "--reason", f"race {n}") for n, d in enumerate(decisions)]
    results = race(ws, obs, commands, env={"FAULTS_HOLD_LOCK": "0.5"})
    winner, busy = split_race(results)
    assert winner[1] == 0
    n = commands.index(winner[0])
    final = json.loads(winner[2])["final"]
    assert (final["decision"], final["reviewer"]) == (decisions[n], f"reviewer{n}")
    inspect = ws.run("inspect").ok()
    assert inspect["final"] == final and inspect["resultsSha256"] == fake_baseline["resultsSha256"]
    assert ws.receipt()["final"] == final
    other = next(d for d in decisions if d != final["decision"])
    ws.run("decide", "--decision", other, "--reviewer", "late", "--reason", "after the race").held(
        "Final decision already recorded", f"by {final['reviewer']}"
    )
    ws.run("decide", "--decision", final["decision"], "--reviewer", "late", "--reason", "a second tap").held(
        "Final decision already recorded", 'reviewer "late"'
    )  # the same decision by someone else, for another reason, is not the same act
    again = ws.run("decide", "--decision", final["decision"], "--reviewer", final["reviewer"], "--reason", final["reason"]).ok()
    assert again["existing"] is True and again["final"] == final  # the same act again: answered, nothing new recorded
    assert ws.receipt()["final"] == final and ws.run("inspect").ok()["final"] == final
    assert ws.run("verify").ok()["ok"] is True
    assert len(obs.records("request")) == 2


@BOTH
def test_race_reconcile_resume(ws, tmp_path, fake_baseline):
    obs = Observer(tmp_path)
    crash(obs.run(ws, "start", "--manifest", ws.manifest, env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}), "after-pending")
    ((key, item, status, *_),) = status_calls(ws)
    assert status == "pending"
    reconcile = ("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "rev", "--reason", "never sent")
    results = race(ws, obs, [reconcile, ("resume",), reconcile, ("resume",)], env={"FAULTS_HOLD_LOCK": "0.5"})
    winner, busy = split_race(results)
    rows = ws.calls()
    if winner[0][0] == "reconcile":
        assert winner[1] == 0 and json.loads(winner[2])["status"] == "abandoned"
        assert [(r["attempt"], r["status"]) for r in rows] == [(1, "abandoned")]
    else:  # the resume got the lock first: it stops at the uncertain call, untouched
        assert_held(winner[1], winner[2], winner[3], f"UNCERTAIN_CALL {item} {key}")
        assert [(r["attempt"], r["status"]) for r in rows] == [(1, "pending")]
        ws.run(*reconcile).ok()
    assert obs.records() == []
    out = obs.run(ws, "resume").ok()
    assert len(out["interrupt"]) == 1
    ws.run("decide", "--decision", "accept", "--reviewer", "rev", "--reason", "looks right").ok()
    assert ws.run("inspect").ok()["resultsSha256"] == fake_baseline["resultsSha256"]
    requests = Counter(r["key"] for r in obs.records("request"))
    rows = assert_journal_consistent(ws, ["alpha", "beta"], requests)
    assert [(r["item_id"], r["attempt"], r["status"]) for r in rows] == [
        ("alpha", 1, "abandoned"),
        ("alpha", 2, "completed"),
        ("beta", 1, "completed"),
    ]
