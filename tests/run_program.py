"""`python tests/run_program.py PROGRAM ARGS…` runs PROGRAM (a durable_job.py: the repository's, or a test's copy) as
`python PROGRAM ARGS…` does, in this real process, with the one difference that its compiled code is kept between runs.

Why: the suite starts the program as a real process a thousand times and more (every crash point, kill and race),
and a script run compiles its 10,000 lines on each start (about 0.18 s of CPU here: Python caches the bytecode of
an imported module, never of the script it runs, and the tests' environment writes no bytecode beside the files).
Here the code object is kept under the machine's temporary folder, named by the sha256 of the interpreter's version,
the file's path and its exact bytes, so an edited copy (even one edited in place within the same second, keeping its
size) never runs stale code.

What stays as in a script run: sys.argv (sys.argv[0] is PROGRAM, so the commands the program prints to paste name
it as `python PROGRAM`), sys.path[0] (PROGRAM's folder, where its durable_job_team/ is found), the module
`durable_job` that runs main() (a script run's first lines import the file by that name and call its main(), as here,
so its extensions reach the same module), signals, exit codes and output.
The tests that start `python durable_job.py` themselves (notify, a few workers) keep the script run as it is;
test_web's Serve (every test's `serve`) and test_work's worker() start it through this file.
"""

import hashlib
import marshal
import os
import sys
import types


def compiled(program: str) -> types.CodeType:
    with open(program, "rb") as fh:
        source = fh.read()
    key = hashlib.sha256(f"{sys.version}\0{program}\0".encode() + source).hexdigest()  # the interpreter, the path, the bytes
    folder = os.path.join(
        os.environ.get("TMPDIR") or "/tmp", f"durable-job-tests-code-{os.getuid()}"
    )  # no module more than a script run loads
    path = os.path.join(folder, key)
    try:
        with open(path, "rb") as fh:
            return marshal.load(fh)
    except (FileNotFoundError, EOFError, ValueError):
        pass
    code = compile(source, program, "exec", dont_inherit=True)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    partial = f"{path}.{os.getpid()}"
    with open(partial, "wb") as fh:
        marshal.dump(code, fh)
    os.replace(partial, path)  # whole or absent: a run beside this one reads one or the other
    return code


def run(program: str, argv: list) -> None:
    program = os.path.abspath(program)
    sys.argv = [program, *argv]
    sys.path[0] = os.path.dirname(program)
    module = types.ModuleType("durable_job")
    module.__file__ = program
    sys.modules["durable_job"] = module  # what a script run's first lines import, before the code runs (as an import's)
    exec(compiled(program), module.__dict__)
    sys.exit(module.main())


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2:])
