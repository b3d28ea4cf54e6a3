"""The project's own checks: the type checker catches a misspelt key of the program's rows.

`make test` runs ruff (lint and format check) before the suite and mypy over the tree beside it; this test shows
that mypy's strictness is enough to notice the slip the typed rows exist for.
"""

import os
import shutil
import subprocess
import sys

from conftest import REPO

SLIPS = [  # (the line as written, the same line with its key misspelt, the misspelt key)
    ('"threadId": job["threadId"],', '"threadId": job["threadID"],', "threadID"),
    ('if actual != item["sha256"]', 'if actual != item["sha265"]', "sha265"),
]


def test_the_type_checker_catches_a_misspelt_key_of_a_typed_row(tmp_path):
    """Both slips in one copy, one mypy run, warm from the tree's own cache when there is one: it reports exactly one error at each slipped
    line, naming the misspelt key, and nothing else, so the copy was clean but for them (`make test` runs mypy on the
    tree itself too)."""
    for name in ("durable_job.py", "pyproject.toml"):
        shutil.copy(os.path.join(REPO, name), tmp_path / name)
    shutil.copytree(os.path.join(REPO, "durable_job_team"), tmp_path / "durable_job_team")  # pyproject's mypy files name it
    lines = (tmp_path / "durable_job.py").read_text().split("\n")
    slipped_at = {}
    for old, new, key in SLIPS:
        at = next(n for n, line in enumerate(lines) if old in line)
        lines[at] = lines[at].replace(old, new, 1)
        slipped_at[at + 1] = key
    (tmp_path / "durable_job.py").write_text("\n".join(lines))
    cache = os.path.join(REPO, ".mypy_cache")  # `make test` ran mypy on the tree beside the suite: the libraries' types are
    if os.path.isdir(cache):  # read from its cache, and only what the slips change is checked again (a cold run: 20-50 s)
        shutil.copytree(cache, tmp_path / ".mypy_cache")
    mypy = [sys.executable, "-m", "mypy"]  # installed with requirements-dev.txt
    slipped = subprocess.run(mypy, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert slipped.returncode == 1, slipped.stdout
    errors = [line for line in slipped.stdout.splitlines() if ": error:" in line]
    assert sorted(int(line.split(":")[1]) for line in errors) == sorted(slipped_at), slipped.stdout
    for line in errors:
        assert line.startswith("durable_job.py:") and "TypedDict" in line, line
        assert slipped_at[int(line.split(":")[1])] in line, line


def test_the_docs_python_example_runs_as_printed(tmp_path, capsys):
    """The "From Python" example of docs/real-job.md (moved there from the README), with its two paths
    pointed at a new job: it decides and verifies."""
    from conftest import Workspace

    with open(os.path.join(REPO, "docs", "real-job.md"), encoding="utf-8") as fh:
        page = fh.read()
    section = page[page.index("## From Python") :]
    code = section[section.index("```python\n") + len("```python\n") : section.index("```", section.index("```python\n") + 10)]
    ws = Workspace(tmp_path)
    ws.write_manifest()
    code = code.replace("/home/dana/jobs/q3/state", ws.state).replace("/home/dana/jobs/q3/manifest.json", ws.manifest)
    exec(compile(code, "docs/real-job.md", "exec"), {})
    assert capsys.readouterr().out.split() == ["decided", "True"]
