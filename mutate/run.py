"""make mutate: apply each named mutant to durable_job.py, one at a time, and run the tests that guard it.

Each mutant (mutate/mutants.py) is one small, plausible bug: an exact piece of durable_job.py (or of the
file its `path` names, such as durable_job_team/web.py) and what it becomes. For each, the harness copies the repository to a temporary folder, makes the edit there
(the working tree is never touched), runs the mutant's tests with `pytest -x`, and prints

    killed    NAME  (by TEST)
    SURVIVED  NAME  (GUARANTEE: no test noticed)

then the ratio. A mutant whose piece of code is no longer in the file (or is there twice) is reported
STALE: after a refactor, update its `old` text. Exit 0 only when every mutant is killed.

    python mutate/run.py                  # every mutant, two at a time
    python mutate/run.py NAME [NAME ...]  # only these
    python mutate/run.py --list           # name, guarantee and tests of each (and STALE, if its code is not found once)
    python mutate/run.py --file F         # the mutants of another list (a Python file defining MUTANTS)

It is slow (minutes: each mutant runs real processes) and is not part of `make test`; run it after
changing a guarantee's code or its tests, and before a refactor that moves code.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROGRAM = "durable_job.py"
SKIP = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "bench", "mutate"}


def load(path: str) -> list:
    spec = importlib.util.spec_from_file_location("mutants", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MUTANTS


def copy_repo(target: str) -> None:
    for name in os.listdir(REPO):
        if name in SKIP or name.endswith(".egg-info"):
            continue
        src = os.path.join(REPO, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(target, name), ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, os.path.join(target, name))


def target(mutant) -> str:
    """The file the mutant edits, relative to the repository: durable_job.py unless it names another."""
    return getattr(mutant, "path", None) or PROGRAM


def stale(folder: str, mutant) -> str | None:
    """Why the mutant's code cannot be found exactly once in its file under folder; None when it can."""
    try:
        with open(os.path.join(folder, target(mutant)), encoding="utf-8") as fh:
            count = fh.read().count(mutant.old)
    except FileNotFoundError:
        return f"its file {target(mutant)} is not there: update its `path`"
    return None if count == 1 else f"its code is in {target(mutant)} {count} times (expected once): update its `old` text"


def mutate(folder: str, mutant) -> str | None:
    """Apply the mutant inside folder; None when applied, else why it cannot be."""
    why = stale(folder, mutant)
    if why:
        return why
    path = os.path.join(folder, target(mutant))
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text.replace(mutant.old, mutant.new))
    return None


def run_one(mutant, timeout: float) -> tuple:
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as folder:
        copy_repo(folder)
        stale = mutate(folder, mutant)
        if stale:
            return "STALE", mutant, stale, 0.0
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DURABLE_JOB_"))}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # a temporary root of its own: two pytest sessions sharing /tmp/pytest-of-USER prune each other's folders
        argv = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "--no-header",
            "-rf",
            f"--basetemp={os.path.join(folder, '.pytest-tmp')}",
            *mutant.tests,
        ]
        try:
            proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed", mutant, f"timed out after {timeout:.0f} s (a hang counts as noticed)", time.monotonic() - began
        seconds = time.monotonic() - began
        if proc.returncode == 0:
            return "SURVIVED", mutant, f"{mutant.guarantee}: no test noticed", seconds
        failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
        if proc.returncode in (1,) and failed:
            return "killed", mutant, f"by {failed[0]}", seconds
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return "ERROR", mutant, f"pytest exit {proc.returncode}: {' | '.join(tail)}", seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="run only these mutants")
    parser.add_argument("--file", default=os.path.join(HERE, "mutants.py"), help="a Python file defining MUTANTS")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2: one per core)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant's tests")
    args = parser.parse_args(argv)
    mutants = load(args.file)
    names = [m.name for m in mutants]
    if len(set(names)) != len(names):
        sys.exit("two mutants share a name")
    if args.names:
        unknown = sorted(set(args.names) - set(names))
        if unknown:
            sys.exit(f"no mutant named {unknown[0]}; see --list")
        mutants = [m for m in mutants if m.name in args.names]
    if args.list:
        stale_ones = 0
        for m in mutants:
            why = stale(REPO, m)
            stale_ones += bool(why)
            print(
                f"{m.name:<40} {m.guarantee}\n{'':<40} {target(m)}; tests: {' '.join(m.tests)}"
                + (f"\n{'':<40} STALE: {why}" if why else "")
            )
        return 1 if stale_ones else 0
    width = max(len(m.name) for m in mutants)
    outcomes = []
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for verdict, mutant, detail, seconds in pool.map(lambda m: run_one(m, args.timeout), mutants):
            outcomes.append(verdict)
            print(f"{verdict:<9} {mutant.name:<{width}}  {seconds:5.0f} s  {detail}", flush=True)
    killed = outcomes.count("killed")
    print(
        f"\n{killed}/{len(outcomes)} killed ({killed / len(outcomes):.0%}) in {time.monotonic() - began:.0f} s"
        + "".join(f"; {outcomes.count(v)} {v}" for v in ("SURVIVED", "STALE", "ERROR") if v in outcomes)
    )
    return 0 if killed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
