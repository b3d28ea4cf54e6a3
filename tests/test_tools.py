"""The project's own checks: the type checker catches a misspelt key of the program's rows.

`make test` runs ruff (lint and format check) and mypy over the tree before the suite; this test shows
that mypy's strictness is enough to notice the slip the typed rows exist for.
"""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.parametrize(
    "slip",
    [
        ('return read_checkpoint(None, job["threadId"])', 'return read_checkpoint(None, job["threadID"])'),
        ('if actual != item["sha256"]', 'if actual != item["sha265"]'),
    ],
)
def test_the_type_checker_catches_a_misspelt_key_of_a_typed_row(tmp_path, slip):
    mypy = [sys.executable, "-m", "mypy", "--no-incremental"]  # installed with requirements-dev.txt
    for name in ("durable_job.py", "pyproject.toml"):
        shutil.copy(os.path.join(REPO, name), tmp_path / name)
    clean = subprocess.run(mypy, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stdout
    text = (tmp_path / "durable_job.py").read_text()
    old, new = slip
    assert old in text
    (tmp_path / "durable_job.py").write_text(text.replace(old, new, 1))
    slipped = subprocess.run(mypy, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert slipped.returncode == 1 and "TypedDict" in slipped.stdout and new.split('"')[1] in slipped.stdout, slipped.stdout
