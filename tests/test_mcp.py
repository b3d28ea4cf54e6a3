"""Sources behind a read-only MCP server, proven through the CLI against a real server over stdio.

The server is tests/mcp_server.py (the SDK's MCPServer). It appends every JSON-RPC message it
receives to its own log *before* the SDK handles it: that log is the witness of what the program
sent. It also offers a `delete_everything` tool, which writes a marker file if it is ever called,
and prints noise on its stderr, which must never reach the CLI's output.
"""

import json
import os
import subprocess
import sys
import time

import pytest

import durable_job
from conftest import ALPHA, BETA, FAKE_KEY, PROGRAM, TESTS, Result, Workspace, clean_env, sha256

SERVER = os.path.join(TESTS, "mcp_server.py")
BIG = "x" * 3000 + "\n"  # mcp_server.py's docs://big: one byte over the bound
BLOB = b"\x89PNG\r\n\x1a\n\x00\x01binary"  # mcp_server.py's docs://blob
READ_ONLY_SESSION = ["initialize", "notifications/initialized", "resources/read"]


class Docs:
    """One test's MCP server command line, its request log and the file behind docs://alpha."""

    def __init__(self, ws: Workspace):
        self.log = os.path.join(ws.root, "mcp-requests.log")
        self.alpha_file = os.path.join(ws.root, "served-alpha.txt")
        self.serve_alpha(ALPHA)

    def command(self) -> list:
        return [sys.executable, SERVER, "--log", self.log, "--alpha-file", self.alpha_file]

    def serve_alpha(self, text: str) -> None:
        with open(self.alpha_file, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

    def item(self, item_id: str, uri: str, served, **spec) -> dict:
        return {"id": item_id, "mcp": {"command": self.command(), "uri": uri, **spec}, "sha256": sha256(served)}

    def sessions(self) -> list:
        """The methods received, one list per server launch (in launch order)."""
        out = []
        if not os.path.exists(self.log):
            return out
        with open(self.log, encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                if record["method"] == "<server-started>":
                    out.append([])
                else:
                    out[-1].append(record)
        return out

    def pids(self) -> list:
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as fh:
            return [r["pid"] for r in map(json.loads, fh) if r["method"] == "<server-started>"]

    def methods(self) -> list:
        return [[r["method"] for r in session] for session in self.sessions()]

    def assert_read_only(self, uri: str, launches: int | None = None) -> None:
        """Every launch got exactly initialize, initialized, one resources/read of uri; no tool was touched."""
        sessions = self.sessions()
        if launches is not None:
            assert len(sessions) == launches, self.methods()
        assert sessions, "the MCP server was never launched"
        for session in sessions:
            assert [r["method"] for r in session] == READ_ONLY_SESSION, self.methods()
            assert session[-1]["params"] == {"uri": uri}
        assert not os.path.exists(self.log + ".TOOL-CALLED"), "a tool was called"


@pytest.fixture
def docs(ws) -> Docs:
    ws.env["DURABLE_JOB_MCP_TIMEOUT"] = "60"  # the 10 s default is for people; a loaded test machine needs room
    return Docs(ws)


def mcp_manifest(ws: Workspace, *mcp_items, files=None, **overrides) -> dict:
    """A valid manifest with the given file sources ({id: text}) followed by the MCP items."""
    manifest = ws.manifest_dict(sources=files if files is not None else {}, jobId="mcp-journey", **overrides)
    manifest["items"] = manifest["items"] + list(mcp_items)
    ws.write_manifest(manifest)
    return manifest


def first_line(text: str) -> str:
    return text.splitlines()[0]


def by_id(results: list) -> dict:
    return {r["itemId"]: r for r in results}


# ---------------------------------------------------------------------------
# the journey


def test_seal_writes_an_mcp_manifest_into_a_folder_it_creates(ws, docs):
    out = os.path.join(ws.root, "new", "folder", "manifest.json")
    sealed = ws.run(
        "seal",
        "--out",
        out,
        "--job-id",
        "mcp-new",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        "--mcp-command",
        json.dumps(docs.command()),
        "--mcp-uri",
        "docs://beta",
        "--mcp-id",
        "beta",
    ).ok()
    assert sealed["manifest"] == out and sealed["items"][0]["sha256"] == sha256(BETA)


def test_seal_then_a_full_job_with_one_file_item_and_one_mcp_item(ws, docs):
    """seal reads the resource and records its hash; start and decide each re-read it; only resources/read is sent."""
    sealed = ws.run(
        "seal",
        "--out",
        ws.manifest,
        "--force",
        "--job-id",
        "mcp-journey",
        "--approved-by",
        "owner@example.test",
        "--mode",
        "fake",
        "--model",
        "fake-structural-1",
        "--mcp-command",
        json.dumps(docs.command()),
        "--mcp-uri",
        "docs://beta",
        "--mcp-id",
        "beta",
        os.path.join(ws.src, "alpha.txt"),
    ).ok()
    with open(ws.manifest, encoding="utf-8") as fh:
        manifest = json.load(fh)
    assert manifest["items"] == [
        {"id": "alpha", "path": "alpha.txt", "sha256": sha256(ALPHA)},
        {"id": "beta", "mcp": {"command": docs.command(), "uri": "docs://beta"}, "sha256": sha256(BETA)},
    ]
    assert sealed["items"] == manifest["items"]
    docs.assert_read_only("docs://beta", launches=1)

    out = ws.start().ok()
    docs.assert_read_only("docs://beta", launches=2)  # start reads each source once
    results = by_id(out["results"])
    assert {k: r["status"] for k, r in results.items()} == {"alpha": "validated", "beta": "validated"}
    assert results["beta"]["sourceSha256"] == sha256(BETA)
    saved = by_id(ws.run("inspect").ok()["results"])
    assert saved["beta"]["summary"] == first_line(BETA)  # the graph saw the text the server returned
    assert saved["beta"]["citations"][0]["quote"] == first_line(BETA)

    launched = len(docs.sessions())
    final = ws.run("decide", "--decision", "accept", "--reviewer", "rev@example.test", "--reason", "checked").ok()
    assert final["final"]["decision"] == "accept"
    docs.assert_read_only("docs://beta", launches=launched + 1)  # decide re-reads the source before deciding


def test_a_resource_changed_between_start_and_resume_stops_the_job_like_a_changed_file(ws, docs):
    mcp_manifest(ws, docs.item("alpha", "docs://alpha", ALPHA), files={"beta": BETA})
    crashed = ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"})
    assert crashed.code == 92, crashed.stderr
    rows = ws.db_rows()
    assert [(r[1], r[2]) for r in rows] == [("beta", "completed")]

    docs.serve_alpha(ALPHA.replace("owner review", "no review"))  # the server now serves other bytes
    before = ws.state_bytes()
    ws.run("resume").held("Source bound/hash/size failure: alpha", "docs://alpha changed since sealing", sha256(ALPHA))
    assert ws.state_bytes() == before and ws.db_rows() == rows  # nothing else changed, nothing was called

    docs.serve_alpha(ALPHA)  # the approved bytes are back: the job continues, reusing the completed call
    out = ws.run("resume").ok()
    assert by_id(out["results"])["alpha"] == {"itemId": "alpha", "status": "validated", "sourceSha256": sha256(ALPHA)}
    assert [(r[1], r[2]) for r in ws.db_rows()] == [("beta", "completed"), ("alpha", "completed")]

    docs.serve_alpha(ALPHA + "one more line\n")  # ... and a later decide re-checks it too
    before = ws.state_bytes()
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x").held(
        "Source bound/hash/size failure: alpha", "changed since sealing"
    )
    assert ws.state_bytes() == before
    docs.assert_read_only("docs://alpha", launches=4)


@pytest.mark.parametrize("ws", ["store"], indirect=True)
def test_in_a_store_an_mcp_item_is_read_once_at_start_and_its_sealed_copy_serves_every_later_machine(ws, docs):
    """A store job carries its sources' bytes: after start no machine launches the server again, so a resource
    that changes later (or a machine without the server) cannot stop it; the results still match the sealed bytes."""
    mcp_manifest(ws, docs.item("alpha", "docs://alpha", ALPHA), files={"beta": BETA})
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-ledger"}).code == 92
    launched = len(docs.sessions())
    assert launched == 1
    docs.serve_alpha(ALPHA.replace("owner review", "no review"))
    out = ws.run("resume").ok()
    assert by_id(out["results"])["alpha"] == {"itemId": "alpha", "status": "validated", "sourceSha256": sha256(ALPHA)}
    assert by_id(ws.run("inspect").ok()["results"])["alpha"]["citations"][0]["quote"] == first_line(ALPHA)
    ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "x").ok()
    assert len(docs.sessions()) == launched and ws.run("verify").ok()["ok"] is True


# ---------------------------------------------------------------------------
# the server's environment: mcp.env (sealed settings) and mcp.passEnv (secrets from the caller)

SECRET_TOKEN = "docs-token-" + "s3cr3t" * 4  # a made-up read token: it must reach the server and nothing else


def env_names(text: str) -> set:
    return set(text.split(": ", 1)[1].split())


def all_state_bytes(ws: Workspace) -> bytes:
    out = b""
    for dirpath, _, files in os.walk(ws.state):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                out += fh.read()
    return out


def test_a_server_gets_its_sealed_env_and_passed_secrets_and_nothing_else(ws, docs):
    """seal --mcp-env / --mcp-pass-env: a literal setting is sealed in the manifest, a secret is copied from the
    caller at each launch and never written; the server's whole environment is the SDK's minimal default plus
    exactly those (the caller's API key, other settings and PYTHON* variables never reach it)."""
    from mcp.client.stdio import get_default_environment

    served = os.path.join(ws.root, "report-for-server.txt")
    with open(served, "w") as fh:
        fh.write(BETA)
    caller = {"OPENAI_API_KEY": FAKE_KEY, "DOCS_TOKEN": SECRET_TOKEN, "DOCS_PATH": "/caller/own/value", "CALLER_ONLY_SETTING": "x"}
    ws.env.update(caller)
    seal = [
        "seal",
        "--job-id",
        "mcp-env",
        "--approved-by",
        "owner@example.test",
        "--mode",
        "fake",
        "--model",
        "fake-structural-1",
        "--mcp-command",
        json.dumps(docs.command()),
    ]
    names_out = os.path.join(ws.src, "names.json")
    sealed = ws.run(
        *seal,
        "--out",
        names_out,
        "--mcp-uri",
        "docs://env-names",
        "--mcp-id",
        "names",
        "--mcp-env",
        "DOCS_MODE=audit",
        "--mcp-pass-env",
        "DOCS_TOKEN",
    ).ok()
    names_item = sealed["items"][0]
    assert names_item["mcp"]["env"] == {"DOCS_MODE": "audit"} and names_item["mcp"]["passEnv"] == ["DOCS_TOKEN"]
    report_item = ws.run(
        *seal,
        "--out",
        os.path.join(ws.src, "report.json"),
        "--mcp-uri",
        "docs://env-file",
        "--mcp-id",
        "report",
        "--mcp-env",
        f"DOCS_PATH={served}",
    ).ok()["items"][0]
    assert report_item["sha256"] == sha256(BETA)  # the server read the file its sealed DOCS_PATH names
    mcp_manifest(ws, report_item, names_item)
    with open(ws.manifest, "rb") as fh:
        manifest_bytes = fh.read()

    started = ws.start()
    out = started.ok()
    assert {r["itemId"]: r["status"] for r in out["results"]} == {"report": "validated", "names": "validated"}
    seen = env_names(by_id(ws.run("inspect").ok()["results"])["names"]["summary"])
    allowed = set(get_default_environment()) | {"DOCS_MODE", "DOCS_TOKEN", "LC_CTYPE"}  # LC_CTYPE: Python's C-locale coercion
    assert {"DOCS_MODE", "DOCS_TOKEN"} <= seen and seen <= allowed, seen
    assert not seen & {"OPENAI_API_KEY", "DOCS_PATH", "CALLER_ONLY_SETTING", "PYTHONDONTWRITEBYTECODE"}
    for where, data in (
        ("manifest", manifest_bytes),
        ("state", all_state_bytes(ws)),
        ("output", (json.dumps(sealed) + started.stdout + started.stderr).encode()),
    ):
        assert SECRET_TOKEN.encode() not in data, f"the passed secret is in the {where}"

    ws.run("seal", *seal[1:], "--out", names_out, "--force", "--mcp-uri", "docs://env-names", "--mcp-env", "NOT A NAME=x").held(
        "UsageError", "--mcp-env", "NAME=VALUE", "--mcp-pass-env"
    )
    ws.run(*seal[:9], "--out", names_out, "--force", "--mcp-pass-env", "DOCS_TOKEN", os.path.join(ws.src, "names.json")).held(
        "--mcp-pass-env", "need --mcp-uri"
    )


def test_the_api_key_reaches_only_a_server_that_names_it_in_pass_env(ws, docs):
    no, yes = ("OPENAI_API_KEY visible to this MCP server: no\n", "OPENAI_API_KEY visible to this MCP server: yes\n")
    mcp_manifest(
        ws, docs.item("unasked", "docs://key-visible", no), docs.item("asked", "docs://key-visible", yes, passEnv=["OPENAI_API_KEY"])
    )
    out = ws.start(env={"OPENAI_API_KEY": FAKE_KEY}).ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    saved = by_id(ws.run("inspect").ok()["results"])
    assert saved["unasked"]["summary"].endswith(": no") and saved["asked"]["summary"].endswith(": yes")
    assert FAKE_KEY.encode() not in all_state_bytes(ws)


def test_a_missing_pass_env_variable_holds_naming_it_and_launches_and_calls_nothing(ws, docs, provider):
    item = docs.item("names", "docs://key-visible", "OPENAI_API_KEY visible to this MCP server: no\n", passEnv=["DOCS_TOKEN"])
    mcp_manifest(ws, item, files={"alpha": ALPHA}, mode="openai", model="gpt-test")
    ws.env.update(provider.env())
    result = ws.start()
    assert result.code == 2
    result.held(
        "HOLD: SourceError: Source names",
        "needs DOCS_TOKEN from the environment (mcp.passEnv)",
        "export DOCS_TOKEN and run the command again",
    )
    assert not os.path.exists(ws.state) and provider.requests() == [] and docs.sessions() == []
    out = ws.start(env={"DOCS_TOKEN": SECRET_TOKEN}).ok()  # the fix: export it
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    assert len(provider.requests()) == 2
    ws.run("status").ok()  # read-only commands never launch a server, so never need the variable
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").held("needs DOCS_TOKEN")


def test_a_passed_secret_that_the_servers_error_echoes_is_never_printed(ws, docs):
    missing = f"/nonexistent/{SECRET_TOKEN}/report.txt"
    mcp_manifest(ws, docs.item("report", "docs://env-file", BETA, passEnv=["DOCS_PATH"]))
    result = ws.start(env={"DOCS_PATH": missing})
    line = result.held("HOLD: SourceError: Source report", "[redacted]")
    assert SECRET_TOKEN not in result.stdout + result.stderr, line


# ---------------------------------------------------------------------------
# each failure names its cause, with one HOLD line, and changes nothing
# (the cases run concurrently, once per module: each MCP launch costs seconds)

FAILURES = {
    # name: (uri, served bytes the manifest seals, extra mcp keys, phrases in the HOLD line)
    "cannot-launch": (
        "docs://beta",
        BETA,
        {},
        ["HOLD: SourceError: Source doc:", "'/nonexistent/mcp-server' could not be launched", "No such file or directory"],
    ),
    "server-exits": (
        "docs://beta",
        BETA,
        {},
        ["HOLD: SourceError: Source doc:", "closed the connection before answering docs://beta", "not an MCP stdio server"],
    ),
    "timeout": (
        "docs://slow",
        ALPHA,
        {"timeoutSeconds": 1},
        ["HOLD: SourceError: Source doc:", "timed out", "docs://slow within 1 s", "mcp.timeoutSeconds"],
    ),
    "no-such-resource": (
        "docs://nope",
        ALPHA,
        {},
        ["HOLD: SourceError: Source doc:", "MCP resource docs://nope does not exist", "check mcp.uri"],
    ),
    "bytes-changed": (
        "docs://beta",
        ALPHA,
        {},
        ["HOLD: SourceError: Source bound/hash/size failure: doc", "docs://beta changed since sealing", sha256(BETA)],
    ),
    "not-text": ("docs://blob", BLOB, {}, ["HOLD: SourceError: Source doc:", "docs://blob is not text"]),
    "over-3000-bytes": ("docs://big", BIG, {}, ["HOLD: SourceError: Source bound/hash/size failure: doc", "3001 bytes, over 3000"]),
    "seal-not-text": ("docs://blob", BLOB, {}, ["HOLD: SourceError: Source mcp1:", "docs://blob is not text"]),
}


@pytest.fixture(scope="module")
def failure_runs(tmp_path_factory) -> dict:
    """Run one command per failure case, all at once; {case: (workspace, docs, Result, seconds)}.

    Every case but the last starts a job; "seal-not-text" asks seal for the blob resource instead.
    """
    runs = {}
    for case, (uri, served, extra, _) in FAILURES.items():
        ws = Workspace(tmp_path_factory.mktemp(case))
        docs = Docs(ws)
        item = docs.item("doc", uri, served, **extra)
        if case == "cannot-launch":
            item["mcp"]["command"] = ["/nonexistent/mcp-server", "--log", docs.log]
        if case == "server-exits":
            item["mcp"]["command"] = [sys.executable, "-c", "import sys; print('starting', file=sys.stderr); sys.exit(3)"]
        if case.startswith("seal-"):
            args = [
                "seal",
                "--out",
                ws.manifest,
                "--job-id",
                "j",
                "--approved-by",
                "o",
                "--mode",
                "fake",
                "--model",
                "m",
                "--mcp-command",
                json.dumps(docs.command()),
                "--mcp-uri",
                uri,
            ]
        else:
            mcp_manifest(ws, item, files={"alpha": ALPHA})
            args = ["start", "--manifest", ws.manifest, "--state-dir", ws.state]
        env = clean_env()
        env["DURABLE_JOB_MCP_TIMEOUT"] = "60"  # only the timeout case may time out, however loaded the machine
        proc = subprocess.Popen(
            [sys.executable, PROGRAM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ws.root
        )
        runs[case] = (ws, docs, proc, time.monotonic())
    done = {}
    for case, (ws, docs, proc, t0) in runs.items():
        stdout, stderr = proc.communicate(timeout=180)
        done[case] = (ws, docs, Result(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)), time.monotonic() - t0)
    return done


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_each_mcp_failure_holds_with_its_cause_and_changes_nothing(failure_runs, case):
    ws, docs, result, elapsed = failure_runs[case]
    line = result.held(*FAILURES[case][3])  # exactly one line: the server's stderr noise never leaks
    assert "STDERR NOISE" not in result.stderr + result.stdout and result.stdout == ""
    assert not os.path.exists(ws.state), "a refused command must not create the state directory"
    if case.startswith("seal-"):
        assert not os.path.exists(ws.manifest), "a refused seal must write no manifest"
    if case == "timeout":
        # docs://slow answers after 10 minutes (on a loaded machine the 1 s may even run out while the server
        # is still importing): either way the read was cut off, and the server it launched was stopped
        assert elapsed < 90, f"the read was not bounded: {elapsed:.1f} s"
        for pid in docs.pids():
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    elif case in ("cannot-launch", "server-exits"):
        assert docs.sessions() == []
    else:
        assert docs.sessions(), "the server was not launched"
    if case not in ("cannot-launch", "server-exits"):
        assert all(m in READ_ONLY_SESSION for s in docs.methods() for m in s), docs.methods()
        assert not os.path.exists(docs.log + ".TOOL-CALLED")
    assert "Traceback" not in line


def test_the_timeout_comes_from_the_manifest_then_the_environment_then_10_seconds(monkeypatch):
    monkeypatch.delenv("DURABLE_JOB_MCP_TIMEOUT", raising=False)
    assert durable_job.mcp_timeout({"command": ["x"], "uri": "u"}) == 10.0
    monkeypatch.setenv("DURABLE_JOB_MCP_TIMEOUT", "2.5")
    assert durable_job.mcp_timeout({"command": ["x"], "uri": "u"}) == 2.5
    assert durable_job.mcp_timeout({"command": ["x"], "uri": "u", "timeoutSeconds": 1}) == 1.0
    for bad in ("soon", "0", "-1", "121", "nan"):
        monkeypatch.setenv("DURABLE_JOB_MCP_TIMEOUT", bad)
        with pytest.raises(durable_job.SourceError, match="DURABLE_JOB_MCP_TIMEOUT"):
            durable_job.mcp_timeout({"command": ["x"], "uri": "u"})


def test_the_cause_is_taken_from_inside_the_sdks_exception_groups():
    import asyncio

    from mcp.shared.exceptions import MCPError

    wrapped = BaseExceptionGroup("outer", [asyncio.CancelledError(), ExceptionGroup("inner", [MCPError(-32002, "gone")])])
    assert isinstance(durable_job.mcp_leaf_error(wrapped), MCPError)
    assert isinstance(durable_job.mcp_leaf_error(TimeoutError()), TimeoutError)


def test_an_mcp_item_beside_a_missing_manifest_folder_is_refused_before_launch(tmp_path):
    item = {"id": "doc", "mcp": {"command": ["/nonexistent/mcp-server"], "uri": "docs://beta"}, "sha256": sha256(BETA)}
    with pytest.raises(durable_job.SourceError, match="folder .* does not exist"):
        durable_job.read_mcp_source(item, str(tmp_path / "missing"))


def test_mcp_not_installed_holds_with_how_to_install_it(ws, docs, tmp_path):
    """The one allowed trick: a PYTHONPATH stub whose `import mcp` fails, as on a machine without it."""
    stub = tmp_path / "no-mcp" / "mcp"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 'mcp' (test stub)\")\n")
    mcp_manifest(ws, docs.item("doc", "docs://beta", BETA), files={"alpha": ALPHA})
    result = ws.start(env={"PYTHONPATH": str(stub.parent)})
    result.held(
        "HOLD: SourceError: Source doc is an MCP resource but the mcp package is not installed", "pip install -r requirements-mcp.txt"
    )
    assert not os.path.exists(ws.state)
    assert docs.sessions() == []  # nothing was launched


def test_a_file_only_job_never_imports_mcp(ws, tmp_path):
    """mcp is optional: with it missing, a manifest of files still runs."""
    stub = tmp_path / "no-mcp" / "mcp"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 'mcp' (test stub)\")\n")
    out = ws.start(env={"PYTHONPATH": str(stub.parent)}).ok()
    assert {r["status"] for r in out["results"]} == {"validated"}


@pytest.mark.parametrize(
    "spec, phrase",
    [
        ({"command": "python server.py", "uri": "docs://alpha"}, "mcp.command must be a list"),
        ({"command": [], "uri": "docs://alpha"}, "mcp.command must be a list"),
        ({"command": ["x"], "uri": ""}, "mcp.uri must be a non-empty string"),
        ({"command": ["x"], "uri": "docs://alpha", "environment": {}}, "mcp must be"),
        ({"command": ["x"], "uri": "docs://alpha", "env": ["DOCS_PATH=x"]}, "mcp.env must be an object"),
        ({"command": ["x"], "uri": "docs://alpha", "env": {"1BAD": "x"}}, "mcp.env must be an object"),
        ({"command": ["x"], "uri": "docs://alpha", "env": {"A-B": "x"}}, "mcp.env must be an object"),
        ({"command": ["x"], "uri": "docs://alpha", "env": {"DOCS_PATH": 3}}, "mcp.env.DOCS_PATH must be a string"),
        ({"command": ["x"], "uri": "docs://alpha", "env": {"OPENAI_API_KEY": "sk-x"}}, "list it in mcp.passEnv"),
        ({"command": ["x"], "uri": "docs://alpha", "passEnv": "DOCS_TOKEN"}, "mcp.passEnv must be a list"),
        ({"command": ["x"], "uri": "docs://alpha", "passEnv": ["DOCS TOKEN"]}, "mcp.passEnv must be a list"),
        ({"command": ["x"], "uri": "docs://alpha", "passEnv": ["T", "T"]}, "names a variable twice"),
        ({"command": ["x"], "uri": "docs://alpha", "env": {"T": "1"}, "passEnv": ["T"]}, "in both env and passEnv"),
        ({"command": ["x"], "uri": "docs://alpha", "timeoutSeconds": True}, "timeoutSeconds must be a number"),
        ({"command": ["x"], "uri": "docs://alpha", "timeoutSeconds": 0}, "timeoutSeconds must be a number"),
    ],
)
def test_a_malformed_mcp_item_is_refused_before_anything_is_launched(ws, spec, phrase):
    mcp_manifest(ws, {"id": "doc", "mcp": spec, "sha256": sha256(ALPHA)}, files={"alpha": ALPHA})
    ws.start().held("ManifestError", phrase)
    assert not os.path.exists(ws.state)


def test_an_item_with_both_path_and_mcp_is_refused(ws):
    mcp_manifest(
        ws,
        {"id": "doc", "path": "alpha.txt", "mcp": {"command": ["x"], "uri": "docs://a"}, "sha256": sha256(ALPHA)},
        files={"alpha": ALPHA},
    )
    ws.start().held("exactly one of path or mcp")


# ---------------------------------------------------------------------------
# the witness itself: the server really offers the tool, and its log really records a call


def test_the_test_server_offers_a_tool_and_its_log_would_record_a_call(ws, docs):
    """A positive control, so that "no tools/call in the log" above means something."""
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def misbehave():
        with anyio.fail_after(60):
            return await session_calling_the_tool()

    async def session_calling_the_tool():
        params = StdioServerParameters(command=sys.executable, args=docs.command()[1:])
        with open(os.devnull, "w") as devnull:
            async with stdio_client(params, errlog=devnull) as (reader, writer), ClientSession(reader, writer) as session:
                await session.initialize()
                tools = await session.list_tools()
                await session.call_tool("delete_everything", {"confirm": True})
                return [t.name for t in tools.tools]

    names = anyio.run(misbehave)
    assert names == ["delete_everything"]
    assert docs.methods() == [["initialize", "notifications/initialized", "tools/list", "tools/call"]]
    assert os.path.exists(docs.log + ".TOOL-CALLED")
