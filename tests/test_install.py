"""Installed like other Python tools: `pip install .` puts a `durable-job` command on PATH.

The command runs the same single module, so a job started as `python durable_job.py`
continues as `durable-job` (and back): the seal compares the module's bytes. The team's
extensions (durable_job_team: the web app, its templates and static files) are installed beside it.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, Result, clean_env, kill_group, wait_for

PROJECT_FILES = ("durable_job.py", "pyproject.toml", "README.md", "requirements.txt")
PROJECT_FOLDERS = ("durable_job_team",)  # the team's extensions: a package with its templates and static files


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> str:
    """`pip install` of a copy of the project into a private folder; returns that folder (bin/durable-job inside)."""
    root = tmp_path_factory.mktemp("install")
    project = root / "project"
    project.mkdir()
    for name in PROJECT_FILES:
        shutil.copy(os.path.join(REPO, name), project / name)
    for name in PROJECT_FOLDERS:
        shutil.copytree(os.path.join(REPO, name), project / name, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return str(target)


@pytest.fixture
def ws(ws):
    """These journeys are about how the program is launched: the script's side runs as `python durable_job.py` too."""
    ws.inprocess = False
    return ws


def installed_env(installed: str) -> dict:
    env = clean_env()
    env["PYTHONPATH"] = installed
    env["PATH"] = os.path.join(installed, "bin") + os.pathsep + env.get("PATH", "")
    return env


def durable_job_command(installed: str, *args, cwd) -> Result:
    """Run the installed `durable-job` console script, as a person with it on PATH would."""
    proc = subprocess.run(["durable-job", *args], capture_output=True, text=True, env=installed_env(installed), cwd=cwd, timeout=120)
    return Result(proc)


def test_the_installed_command_is_the_same_module_byte_for_byte(installed):
    with open(os.path.join(installed, "durable_job.py"), "rb") as a, open(os.path.join(REPO, "durable_job.py"), "rb") as b:
        assert a.read() == b.read()
    assert os.access(os.path.join(installed, "bin", "durable-job"), os.X_OK)


def test_the_installed_web_app_is_the_packages_files_templates_and_static_included(installed):
    for folder, _, names in os.walk(os.path.join(REPO, "durable_job_team")):
        for name in names:
            if "__pycache__" in folder:
                continue
            relative = os.path.relpath(os.path.join(folder, name), REPO)
            with open(os.path.join(installed, relative), "rb") as a, open(os.path.join(REPO, relative), "rb") as b:
                assert a.read() == b.read(), relative
    for relative in ("durable_job_team/web.py", "durable_job_team/templates/job.html", "durable_job_team/static/app.css"):
        assert os.path.isfile(os.path.join(installed, relative)), relative


def test_the_installed_command_serves_the_web_app(ws, installed):
    """`durable-job serve` finds its package, templates and static files where pip put them, and serves a page."""
    import httpx

    ws.start().ok()
    proc = subprocess.Popen(
        ["durable-job", "serve", "--root", ws.root, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=installed_env(installed),
        cwd=ws.root,
        start_new_session=True,
    )
    try:
        said: list = []

        def printed_address():
            said.append(proc.stderr.readline())  # blocks until serve says something, or ends
            assert said[-1] or proc.poll() is None, f"serve ended: {''.join(said)}"
            return re.search(r"open (http://\S+)", said[-1])

        address = wait_for(printed_address, timeout=60)
        with httpx.Client(follow_redirects=True, timeout=30) as browser:
            page = browser.get(address.group(1))
            job = browser.get(address.group(1).split("?")[0] + "jobs/journey")
        assert page.status_code == 200 and "Waiting for you (1)" in page.text
        with open(os.path.join(REPO, "durable_job_team", "static", "app.css"), encoding="utf-8") as fh:
            assert fh.read().strip().splitlines()[-1] in page.text  # the package's own CSS, inlined
        assert job.status_code == 200 and 'id="live-state">Awaiting review: draft 1<' in job.text
    finally:
        kill_group(proc)
        proc.wait(timeout=10)


def test_a_job_started_as_a_script_continues_as_the_installed_command_and_back(ws, installed):
    started = ws.start().ok()
    assert started["interrupt"], started
    # the installed command reads, decides and verifies the script's job
    status = durable_job_command(installed, "status", "--state-dir", ws.state, cwd=ws.root).ok()
    assert status["phase"] == "awaiting-review"
    assert status["next"].startswith("durable-job decide "), status["next"]
    decided = durable_job_command(
        installed,
        "decide",
        "--state-dir",
        ws.state,
        "--decision",
        "hold",
        "--reviewer",
        "rev",
        "--reason",
        "installed command decides",
        cwd=ws.root,
    ).ok()
    assert decided["final"]["decision"] == "hold"
    # and the script verifies what the installed command recorded
    assert ws.run("verify").code == 0


def test_the_installed_command_starts_a_job_the_script_resumes(ws, installed):
    crashed = durable_job_command(installed, "start", "--manifest", ws.manifest, "--state-dir", ws.state, cwd=ws.root)
    assert crashed.code == 0, crashed.stderr
    assert ws.run("resume").ok()["interrupt"]
    assert ws.job()["engineSha256"] == __import__("conftest").engine_digest()


def test_an_installed_copy_with_other_bytes_is_refused_as_a_changed_program(ws, installed, tmp_path):
    ws.start().ok()
    changed = tmp_path / "changed"
    shutil.copytree(installed, changed)
    from conftest import in_the_engine, past_the_engine

    text = (changed / "durable_job.py").read_text(encoding="utf-8")
    (changed / "durable_job.py").write_text(past_the_engine(text, "# an edit of the help"), encoding="utf-8")
    shutil.rmtree(changed / "__pycache__", ignore_errors=True)
    again = durable_job_command(str(changed), "resume", "--state-dir", ws.state, cwd=ws.root)
    assert again.code == 0, again.stderr  # outside the engine: the job goes on
    (changed / "durable_job.py").write_text(in_the_engine(text, "# an edit of the engine"), encoding="utf-8")
    shutil.rmtree(changed / "__pycache__", ignore_errors=True)
    held = durable_job_command(str(changed), "resume", "--state-dir", ws.state, cwd=ws.root)
    held.held("Engine changed", "install durable-job==")


def test_the_installed_commands_help_names_it_as_typed(installed, tmp_path):
    helped = durable_job_command(installed, "--help", cwd=str(tmp_path))
    assert helped.code == 0, helped.stderr
    assert helped.stdout.startswith("usage: durable-job "), helped.stdout[:80]


def test_version_names_the_release_the_sealed_bytes_and_the_dependencies(installed, tmp_path):
    """`--version` says what a job started now would seal: the release, the module's sha256, the pins."""
    from importlib import metadata

    import durable_job as dj
    from conftest import engine_digest, sha256

    printed = durable_job_command(installed, "--version", cwd=str(tmp_path))
    assert printed.code == 0, printed.stderr
    with open(os.path.join(installed, "durable_job.py"), "rb") as fh:
        digest = sha256(fh.read())
    lines = printed.stdout.splitlines()
    assert lines[0] == f"durable-job {dj.__version__}"
    # the engine a new job seals, a state directory's and a store's, each with the command that recomputes it here
    engine, store = (next(line for line in lines if line.startswith(head)) for head in ("engine sha256 ", "store engine sha256 "))
    assert engine.split()[2].rstrip(":") == engine_digest() and store.split()[3].rstrip(":") == engine_digest(store=True)
    for line in (engine, store):
        command = line.rsplit("; `", 1)[1].rstrip("`)")
        recomputed = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout.split()[0]
        assert recomputed == line.split(" sha256 ", 1)[1].split(":")[0], (command, recomputed)
    assert f"whole file sha256 {digest}" in printed.stdout and f"graph version {dj.VERSION}" in lines
    dependencies = next(line for line in lines if line.startswith("dependencies (sealed into every job): "))
    for name in dj.DEPENDENCIES:
        assert f"{name} {metadata.version(name)}" in dependencies
    assert "web.py" not in printed.stdout and "workers.py" not in printed.stdout and "templates" not in printed.stdout


@pytest.mark.parametrize(
    "argv,command",
    [
        (["status", "--state-dirr", "x"], "status"),
        (["status", "--state-dir"], "status"),
        (["decide", "--state-dir", "x"], "decide"),
        (["bogus"], ""),
    ],
)
def test_the_installed_commands_hints_name_it_once(installed, tmp_path, argv, command):
    held = durable_job_command(installed, *argv, cwd=str(tmp_path))
    line = held.held("UsageError")
    assert f"see `durable-job {command + ' ' if command else ''}--help`" in line.replace("See `", "see `"), line
    assert "durable-job durable-job" not in line
