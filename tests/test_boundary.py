"""The boundary between durable_job.py (the core) and durable_job_team (the team's package) runs one way (issue 46).

The package registers itself: its team() builds the core's durable_job.Team (a store opener, the store's engine files,
its commands), and the core never names a class or function of the package. These tests read the core's code, and run
the real program as a person would: a team command through `python durable_job.py` in a checkout, a copy of the file
whose folder holds no package, and a copy that would pick up another folder's package.
"""

import ast
import os
import shutil
import subprocess
import sys

import durable_job as dj
from conftest import PROGRAM, REPO, Result, Workspace, clean_env, run_alone, through_mark

TEAM = os.path.join(REPO, "durable_job_team")

# Identifiers of the core that a package module happens to define too, each the core's own: the Team's slots (the
# registry's names, which the package fills), the provider's `response.usage` and Keys.run_command.
CORE_WORDS = {"team", "address_secrets", "set_up_refusal", "store_engine", "usage", "run_command"}


def top_names(tree: ast.Module) -> set:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def core_references(tree: ast.Module) -> set:
    """Every global name the core's functions read, and every attribute it reads on anything."""
    found = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda))):
        local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        local |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        found |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local}
    return found


def test_the_core_names_no_class_or_function_of_the_team_package():
    with open(PROGRAM, encoding="utf-8") as fh:
        core = ast.parse(fh.read())
    package: set = set()
    for name in sorted(f for f in os.listdir(TEAM) if f.endswith(".py")):
        with open(os.path.join(TEAM, name), encoding="utf-8") as fh:
            package |= top_names(ast.parse(fh.read()))
    theirs = package - top_names(core)  # PgStore, delete_job, migrate_schema, work, serve, cmd_jobs, text_usage, ...
    assert {"PgStore", "delete_job", "migrate_schema", "store_limits", "STORE_ENGINE_PARTS", "cmd_serve", "jobs"} <= theirs
    assert sorted(theirs & core_references(core) - CORE_WORDS) == []
    imports = [n for n in ast.walk(core) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [ast.unparse(n) for n in imports if "durable_job_team" in ast.unparse(n)]  # no import statement names it
    loads = [ast.unparse(n) for n in ast.walk(core) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "import_module"]
    assert sorted(w for w in loads if "team" in w.lower()) == ["importlib.import_module(TEAM_PACKAGE)"]  # main's, below the engine
    assert "team_part" not in core_references(core) and "CHANGES_NO_JOB" not in top_names(core)


def engine_words(source: str) -> set:
    """Every word the engine's code says: the names and attributes it reads, the modules it imports and the strings it
    holds (a docstring or a comment may name the package: they describe, they load nothing)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    words = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    words |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    words |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    return words | {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings}


def test_the_engine_names_no_module_of_the_team_package():
    """The engine (durable_job.py through its mark) is closed: no name, import or string of its code says
    durable_job_team. Its spans use the OpenTelemetry API alone; main, below the engine, sets the SDK's provider."""
    engine = engine_words(through_mark(PROGRAM).decode())
    assert {"span", "get_tracer", "opentelemetry"} <= engine  # the words are read: the check below can see a name
    assert sorted(w for w in engine if "durable_job_team" in w) == []
    with open(PROGRAM, encoding="utf-8") as fh:
        assert "durable_job_team" in engine_words(fh.read())  # the program below the engine loads the package by name


def test_the_core_has_a_public_api_and_writes_no_alias_and_no_environment():
    with open(PROGRAM, encoding="utf-8") as fh:
        source = fh.read()
    core = ast.parse(source)
    assert {"Team", "load_team", "open_store", "start", "status", "decide", "main", "UsageError", "Store"} <= set(dj.__all__)
    assert not [n for n in dj.__all__ if not hasattr(dj, n)]
    written = [
        ast.unparse(n)
        for n in ast.walk(core)
        if isinstance(n, (ast.Assign, ast.AugAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Subscript) and ast.unparse(t.value) in ("sys.modules", "os.environ")
    ]
    assert written == []
    calls = {ast.unparse(n.func) for n in ast.walk(core) if isinstance(n, ast.Call)}
    assert not calls & {"os.putenv", "os.environ.update", "os.environ.setdefault"}


def test_a_team_command_run_as_python_durable_job_py_is_the_one_the_package_registered(tmp_path):
    """`python durable_job.py jobs --root` in a checkout runs the package's jobs; the package's UsageError is the
    core's (one module, not the file loaded twice): its refusal is a HOLD line, not an InternalError."""
    ws = Workspace(tmp_path / "job")
    ws.write_manifest()
    assert ws.run("start", "--manifest", ws.manifest, inprocess=False).ok()["interrupt"]
    env = clean_env()

    def run(*args) -> Result:
        proc = subprocess.run([sys.executable, PROGRAM, *args], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
        return Result(proc)

    listed = run("jobs", "--root", str(tmp_path), "--json").ok()
    assert [j["phase"] for j in listed["jobs"]] == ["awaiting-review"]
    assert "serve" in run("--help").stdout and "serve" in dj.load_team("a test").commands
    refused = run("delete", "--state-dir", ws.state).held("delete removes a job from a --store")  # the package's refusal
    assert refused.startswith("HOLD: UsageError: delete removes")  # caught as the core's JobError: no InternalError
    run("jobs", "--root", str(tmp_path), "--store", "postgresql://x@localhost/db").held("give --store URL or --root DIR, not both")


def test_a_copy_of_the_core_beside_no_package_refuses_a_team_command_and_another_folders_package(tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(PROGRAM, alone / "durable_job.py")
    program = str(alone / "durable_job.py")

    def run(*args) -> Result:
        """The copy run as `python durable_job.py ARGS` where no durable_job_team can be imported."""
        return run_alone(program, args, str(tmp_path))

    run("serve", "--root", str(tmp_path)).held("invalid choice: 'serve'", "needs durable_job_team/, the team's package")
    run("status", "--store", "postgresql://x@localhost/db", "--job", "j").held(
        "a --store (the team's PostgreSQL store) needs durable_job_team/"
    )
    helped = run("--help")
    assert helped.code == 0 and " status " in helped.stdout and " serve " not in helped.stdout
    # the checkout's package found on the path, not beside this copy: a store job would run files its engine did not seal
    env = {**clean_env(), "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, program, "jobs", "--root", str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    Result(proc).held("invalid choice: 'jobs'", f"would run {os.path.join(TEAM, '__init__.py')}", "beside this durable_job.py")
    proc = subprocess.run([sys.executable, program, "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0 and " status " in proc.stdout and " jobs " not in proc.stdout  # its own commands, whole


def test_langgraphs_private_layout_is_read_outside_its_section_only_through_one_adapter():
    """The LG_* names (LangGraph's private checkpoint layout) belong to the core's section 10; the team's package reads
    that layout only through durable_job.LangGraphRows. The state directory's store (section 11) still names
    LangGraph's two SQLite table names itself."""
    import re

    for name in sorted(f for f in os.listdir(TEAM) if f.endswith(".py")):
        with open(os.path.join(TEAM, name), encoding="utf-8") as fh:
            assert re.findall(r"\bLG_\w+", fh.read()) == [], name
    with open(PROGRAM, encoding="utf-8") as fh:
        core = fh.read()
    start, end = core.index("\n# 10. Checkpoints"), core.index("\n# 11. Stores")
    outside = set(re.findall(r"\bLG_\w+", core[:start] + core[end:]))
    assert outside == {"LG_CHECKPOINTS_TABLE", "LG_WRITES_TABLE"}
    assert "LangGraphRows" in core[start:end]


def test_the_program_under_another_name_is_refused_not_run_as_another_module(tmp_path):
    """A script run that needs the team's package imports this file by its name, durable_job: a copy named otherwise
    would run whichever durable_job Python finds (the checkout's, an installed one), so it is refused, naming the fix.
    Its own commands need no second module: they run in the script as it is, under any name."""
    shutil.copy(PROGRAM, tmp_path / "review.py")
    proc = subprocess.run([sys.executable, str(tmp_path / "review.py"), "--version"], capture_output=True, text=True, env=clean_env())
    Result(proc).held(f"{tmp_path / 'review.py'} runs as the module durable_job", "name the file durable_job.py")
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "review.py"), "status", "--state-dir", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        env=clean_env(),
    )
    Result(proc).held("StateError", str(tmp_path / "none"))


def test_a_script_run_of_the_cores_own_command_compiles_the_file_once(tmp_path):
    """`python durable_job.py status` where no bytecode is written (PYTHONDONTWRITEBYTECODE, a read-only folder): the
    script's own compile is the only one; importing the file again by name as well cost about 120 ms a command."""
    program = tmp_path / "durable_job.py"
    shutil.copy(PROGRAM, program)
    argv = [sys.executable, "-X", "importtime", str(program), "status", "--state-dir", str(tmp_path / "none")]

    def imported(argv: list) -> list:
        proc = subprocess.run(argv, capture_output=True, text=True, env=clean_env())
        return [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]

    assert clean_env()["PYTHONDONTWRITEBYTECODE"] == "1"
    own = imported(argv)
    assert "sqlite3" in own and "durable_job" not in own  # the core's imports seen; the core itself not a second time
    assert "durable_job" in imported([*argv[:4], "jobs", "--root", str(tmp_path)])  # a team command: by its name
