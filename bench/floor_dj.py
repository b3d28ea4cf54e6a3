"""bench/floor.py's contender "this program": a 3-item openai-mode job through the command API, in this process.

    python bench/floor_dj.py --kind dir   --manifest BASE.json --root DIR
    python bench/floor_dj.py --kind store --manifest BASE.json --root DIR --store URL   # a migrated store

The durable_job imported is the one on PYTHONPATH (the parent puts a copy of the program there: this checkout's,
or `--before REV`'s). A job is `dj.start(store, manifest)` to the review interrupt: on a new state directory each
job (`dj.open_store(state_dir=...)`, its set-up included, closed after), or in the store at URL, opened once for the
child's jobs as a worker or a program calling the API opens it (its connections reused job after job, as the peers
keep theirs), each job its own jobId. The manifest for job N (BASE with its jobId) is written before the timer starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from floor_child import serve

import durable_job as dj


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=("dir", "store"), required=True)
    parser.add_argument("--manifest", required=True, help="the base manifest (its items' files beside it)")
    parser.add_argument("--root", required=True, help="a folder for this child's state directories")
    parser.add_argument("--store", help="the store's URL (--kind store)")
    args = parser.parse_args()
    with open(args.manifest, encoding="utf-8") as fh:
        base = json.load(fh)
    folder = os.path.dirname(os.path.abspath(args.manifest))
    tag = f"{args.kind}-{os.getpid()}"

    def prepare(n: int) -> tuple[str, str]:
        path = os.path.join(folder, f"{tag}-{n}.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({**base, "jobId": f"floor-{tag}-{n}"}, fh)
        return path, os.path.join(args.root, f"job-{n}", "state")

    opened = dj.open_store(store=args.store) if args.kind == "store" else None  # once: its connections serve every job

    def run(arg: tuple[str, str]) -> dict:
        manifest, state = arg
        if opened is not None:
            return dj.start(opened, manifest)
        with dj.open_store(state_dir=state) as store:
            return dj.start(store, manifest)

    def check(out: dict) -> str | None:
        statuses = [r.get("status") for r in out.get("results", [])]
        if not out.get("interrupt") or statuses != ["validated"] * len(base["items"]):
            return f"not at review with every item validated: {statuses}"
        return None

    serve(prepare, run, check, {"version": getattr(dj, "__version__", "?"), "program": dj.__file__})


if __name__ == "__main__":
    main()
