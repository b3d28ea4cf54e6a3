"""The contender's side of bench/floor.py: one child process, its imports and set-up done once, then one job a command.

Standard library only: DBOS's throwaway environment imports this file too.

The parent writes one JSON line a command on the child's stdin and reads one JSON line back:

* {"cmd": "job", "n": N}: prepare job N (untimed: its manifest or file name), run it (timed: wall and CPU), check
  its outcome (untimed); answer {"ms", "cpu_ms", "problem"} ("problem" is None when the job reached its review);
* {"cmd": "count", "n": N}: the same, the job alone between two marker writes to /dev/null that an `strace -f` of
  this process shows, so the parent counts one job's fsyncs and commits and nothing of the set-up or warm-up;
* {"cmd": "quit"}: exit at once (os._exit: no library's exit handler can hang the bench).

The protocol has the process's real stdout to itself: file descriptor 1 is pointed at stderr, so a library that
prints cannot break a reply.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

MARK_BEGIN = b"FLOOR-COUNT-BEGIN"
MARK_END = b"FLOOR-COUNT-END"


def floor_loaded() -> bool:
    """Whether the fsync floor library is mapped into this process (LD_PRELOAD took)."""
    with open("/proc/self/maps") as fh:
        return "fsync_floor" in fh.read()


def serve(prepare, run, check, info: dict | None = None) -> None:
    """Answer the parent's commands: prepare(n) -> arg (untimed), run(arg) -> result (timed), check(result) -> problem."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_WRONLY)
    proto.write(json.dumps({"ready": True, "pid": os.getpid(), "floor": floor_loaded(), **(info or {})}) + "\n")
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            break
        try:
            arg = prepare(msg["n"])
            counting = msg["cmd"] == "count"
            if counting:
                os.write(null, MARK_BEGIN)
            cpu, began = time.process_time(), time.perf_counter()
            result = run(arg)
            ms, cpu_ms = (time.perf_counter() - began) * 1000, (time.process_time() - cpu) * 1000
            if counting:
                os.write(null, MARK_END)
            reply = {"ms": ms, "cpu_ms": cpu_ms, "problem": check(result)}
        except Exception:
            reply = {"error": traceback.format_exc()[-3000:]}
        proto.write(json.dumps(reply) + "\n")
    proto.flush()
    sys.stderr.flush()
    os._exit(0)


def answers_problem(outputs: list, item_ids: list) -> str | None:
    """A peer's outputs checked as this program checks nothing more: each the loopback server's proposal for its item."""
    if len(outputs) != len(item_ids):
        return f"{len(outputs)} answers, expected {len(item_ids)}"
    for text, item_id in zip(outputs, item_ids):
        try:
            if json.loads(text).get("itemId") != item_id:
                return f"answer for {item_id} names another item: {text[:120]!r}"
        except (ValueError, AttributeError):
            return f"answer for {item_id} is no proposal: {text[:120]!r}"
    return None


def load_bodies(path: str) -> tuple[list, list]:
    """The request bodies this program sent for the 3 items (captured by the parent from the loopback server's log)."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    return doc["bodies"], doc["itemIds"]
