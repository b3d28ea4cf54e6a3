"""Holes a security review found (issue 19, items 1-9), each replayed as the attack it was.

A planted symlink in a shared folder, a manifest left readable, an API key a model spells with JSON
escapes, a password in a libpq keyword string, SQL built from a job id, forged worker-log lines, a
right-to-left override on the review page, a FIFO passed as a response file, and a state directory
whose manifest names a program that `verify` would run.
"""

import json
import os
import re
import stat
import sys

import pytest
from test_review import parse_page

from conftest import BOTH, FAKE_KEY, Workspace, hold_run_lock, openai_workspace, store_rows
from durable_job_team import store as team_store

VICTIM_TEXT = "root's private notes: the only copy\n"


def victim(tmp_path) -> str:
    """Another user's private file, which a symlink in a shared folder points at."""
    path = str(tmp_path / "victim.txt")
    with open(path, "w") as fh:
        fh.write(VICTIM_TEXT)
    os.chmod(path, 0o600)
    return path


def assert_untouched(path: str) -> None:
    with open(path) as fh:
        assert fh.read() == VICTIM_TEXT
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def plant(target: str, victim_path: str) -> str:
    """A symlink at the name the old program used for target's temporary file (in-process: this pid)."""
    link = f"{target}.{os.getpid()}.tmp"
    os.symlink(victim_path, link)
    return link


# --- 1. every file the program writes: an unpredictable temporary name, never followed -----------------------


def test_symlinks_planted_at_the_old_temporary_names_change_nothing_but_the_target(tmp_path):
    target = victim(tmp_path)
    ws = Workspace(tmp_path / "job", inprocess=True)  # in-process: the command's pid is this test's, so the old names are known
    ws.write_manifest()
    os.makedirs(ws.state, mode=0o700)
    links = [plant(os.path.join(ws.state, name), target) for name in ("job.json", "receipt.json")]
    ws.start().ok()
    shared = tmp_path / "shared"
    os.makedirs(shared)
    page, manifest = str(shared / "review.html"), str(shared / "manifest.json")
    links += [plant(page, target), plant(manifest, target)]
    ws.run("inspect", "--html", page).ok()
    seal = (
        "seal",
        "--out",
        manifest,
        "--job-id",
        "j",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        os.path.join(ws.src, "alpha.txt"),
    )
    ws.run(*seal).ok()
    ws.run(*seal, "--force").ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    assert_untouched(target)
    for link in links:  # each planted name is still exactly what was planted
        assert os.path.islink(link) and os.readlink(link) == target
    for written in (page, manifest, os.path.join(ws.state, "job.json"), os.path.join(ws.state, "receipt.json")):
        assert os.path.isfile(written) and not os.path.islink(written)
    assert ws.run("verify").ok()["ok"] is True


def test_a_target_that_is_itself_a_symlink_is_replaced_and_its_target_left_alone(ws, tmp_path):
    target = victim(tmp_path)
    ws.start().ok()
    page = str(tmp_path / "review.html")
    os.symlink(target, page)
    ws.run("inspect", "--html", page).ok()
    manifest = str(tmp_path / "m.json")
    os.symlink(target, manifest)
    ws.run(
        "seal",
        "--out",
        manifest,
        "--force",
        "--job-id",
        "j",
        "--approved-by",
        "o",
        "--mode",
        "fake",
        "--model",
        "m",
        os.path.join(ws.src, "alpha.txt"),
    ).ok()
    assert_untouched(target)
    assert not os.path.islink(page) and "<!doctype html>" in open(page).read()
    assert not os.path.islink(manifest) and json.load(open(manifest))["jobId"] == "j"


# --- 2. the manifest is private unless asked ----------------------------------------------------------------


def test_seal_writes_the_manifest_private_whatever_the_umask_and_the_umask_mode_only_when_asked(ws):
    seal = ["seal", "--job-id", "j", "--approved-by", "o", "--mode", "fake", "--model", "m", os.path.join(ws.src, "alpha.txt")]
    saved = os.umask(0o022)  # a usual umask: without the fix, the manifest came out 0644 whatever it was
    try:
        private = os.path.join(ws.root, "private.json")
        ws.run(*seal, "--out", private).ok()
        shared = os.path.join(ws.root, "shared.json")
        ws.run(*seal, "--out", shared, "--use-umask").ok()
        ws.run(*seal, "--out", private, "--force").ok()
    finally:
        os.umask(saved)
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o644


# --- 3. an API key spelled with JSON escapes ----------------------------------------------------------------


def unescaped(text: str) -> str:
    """text with every \\uXXXX escape decoded: what a JSON reader would make of it."""
    return re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), text)


def assert_key_nowhere(*texts: str) -> None:
    for text in texts:
        for form in (text, unescaped(text), unescaped(text.replace("\\\\", "\\"))):
            assert FAKE_KEY not in form, form[max(0, form.find(FAKE_KEY) - 80) :][:200]


def saved_texts(ws: Workspace) -> list:
    """Every byte the job saved, as text: the state directory's files, or every row of the store."""
    if ws.store is not None:
        return ["\n".join(rows) for rows in store_rows(ws.store).values()]
    out = []
    for name in sorted(os.listdir(ws.state)):
        with open(os.path.join(ws.state, name), "rb") as fh:
            out.append(fh.read().decode("utf-8", "replace"))
    return out


@BOTH
@pytest.mark.parametrize("spelling", ["echo-key-escaped", "echo-key-split", "echo-key-output"])
def test_a_key_the_model_spells_with_json_escapes_is_stored_and_shown_redacted(ws, provider, spelling, tmp_path):
    openai_workspace(ws, provider)
    provider.behave(spelling)
    started = ws.start().ok()
    answers = [r["output_text"] for r in provider.requests()]
    assert all(FAKE_KEY in unescaped(a) for a in answers)  # the model did hand the key back
    if spelling != "echo-key-output":
        assert all(FAKE_KEY not in a for a in answers)  # ... only in escaped form: a raw search finds nothing
    assert [r["status"] for r in started["results"]] == ["validated", "validated"]
    inspected = ws.run("inspect").ok()
    assert all(r["summary"].endswith("(sent with [redacted])") for r in inspected["results"]), inspected["results"]
    page = str(tmp_path / "page.html")
    ws.run("inspect", "--html", page).ok()
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "quotes match").ok()
    assert ws.run("verify").ok()["ok"] is True
    assert_key_nowhere(
        *saved_texts(ws),
        open(page).read(),
        json.dumps(started),
        json.dumps(inspected),
        ws.run("status").stdout,
        ws.run("inspect", "--text").stdout,
        json.dumps(decided),
    )


def test_a_passed_mcp_secret_in_model_output_is_redacted_like_the_key():
    """passEnv values are secrets too: whatever echoes one (a model, a server error) shows [redacted]."""
    import durable_job as dj

    spec = {"id": "doc", "mcp": {"command": ["x"], "uri": "docs://x", "passEnv": ["DOCS_TOKEN"]}, "sha256": "0" * 64}
    os.environ["DOCS_TOKEN"] = "tok-9f8e7d6c"
    try:
        _, passed = dj.mcp_environment(spec, {})
        assert passed == ["tok-9f8e7d6c"]  # what read_mcp_source adds to the command's Secrets
        escaped = "".join(f"\\u{ord(c):04x}" for c in "tok-9f8e7d6c")
        assert dj.redact('{"summary": "token ' + escaped + '"}', dj.Secrets(passed)) == '{"summary": "token [redacted]"}'
    finally:
        del os.environ["DOCS_TOKEN"]


# --- 4. a libpq keyword string is refused, and no password is ever printed -----------------------------------


def test_a_keyword_string_store_address_is_refused_without_printing_its_password(tmp_path, store_url):
    secret = "Pw-7g2kq-never-printed"
    keywords = f"host=127.0.0.1 port={store_url.split(':')[2].split('/')[0]} user=durable password={secret} dbname=x"
    ws = Workspace(tmp_path, store=keywords)
    ws.write_manifest()
    runs = [
        ws.start(),
        ws.run("status", "--job", "journey"),
        ws.run("jobs", "--store", keywords),
        ws.run("migrate", "--store", keywords),
        ws.run("submit", "--manifest", ws.manifest, "--store", keywords),
        ws.run("work", "--store", keywords, "--until-idle"),
        ws.run("status", "--job", "journey", state=False, env={"DURABLE_JOB_STORE": keywords}),
    ]
    for result in runs:
        line = result.held("UsageError", "postgresql:// URL", "PGPASSWORD or ~/.pgpass")
        assert secret not in result.stdout + result.stderr, line


def test_a_password_in_the_url_is_found_by_the_drivers_parser_and_never_printed(ws_store):
    """In the user info, percent-encoded, or in the query: the password libpq would use is the one hidden."""
    import durable_job as dj

    for url, secret in (("postgresql://u:p%40ss-w0rd@h/db", "p@ss-w0rd"), ("postgresql://u@h/db?password=qu%3Dery-pw", "qu=ery-pw")):
        assert team_store.conninfo_password(url) == secret
        secrets = dj.Secrets(team_store.address_secrets(url))
        assert dj.redact(f"error: {secret} rejected", secrets) == "error: [redacted] rejected"
        assert dj.redact(f"error: {secret} rejected", dj.Secrets()) != "error: [redacted] rejected"  # passed, not global
        store = dj.open_store(store=url, job="x")
        assert store.secrets.words >= {secret} and dj.redact(secret, store.secrets) == "[redacted]"
        assert secret not in team_store.public_url(url)


# --- 5. no SQL is built from a job id -------------------------------------------------------------------------


def test_a_job_id_that_is_sql_under_standard_conforming_strings_off_names_only_itself(tmp_path, pg_server, store_url):
    """With standard_conforming_strings off, a job id quoted into SQL by doubling its quotes becomes code:
    `y\\' || current_user --` read as 'y''' || current_user, the job y'durable. Bound parameters cannot."""
    url = store_url + "?options=-c%20standard_conforming_strings%3Doff"
    sly, other = "y\\' || current_user --", "y'durable"
    jobs = {}
    for job_id, folder in ((other, "other"), (sly, "sly")):
        w = Workspace(tmp_path / folder, store=url)
        w.write_manifest(jobId=job_id)
        w.start().ok()
        jobs[job_id] = w
    own = {job_id: {k for (k,) in pg_server_rows(pg_server, store_url, job_id)} for job_id in jobs}
    assert len(own[sly]) == 2 and len(own[other]) == 2 and not own[sly] & own[other]
    for job_id, w in jobs.items():
        status = w.run("status", "--job", job_id).ok()
        assert {c[0] for c in status["calls"]} == own[job_id], job_id
        assert w.run("verify", "--job", job_id).ok()["ok"] is True


def pg_server_rows(pg_server, url: str, job_id: str) -> list:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT operation_key FROM durable_job.calls WHERE job_id = %s", (job_id,)).fetchall()


# --- 6. a job id cannot forge worker-log lines ------------------------------------------------------------------


def test_a_job_id_with_a_newline_or_a_terminal_escape_cannot_forge_a_worker_log_line(tmp_path, store_url):
    forged = "q1\n2026-12-01T00:00:00Z work evil:1 job payroll: claimed (ready)\x1b]0;owned\x07"
    w = Workspace(tmp_path, store=store_url)
    w.write_manifest(jobId=forged)
    w.run("submit", "--manifest", w.manifest, "--store", store_url).ok()
    done = w.run("work", "--store", store_url, "--until-idle", state=False)
    assert done.code == 0, done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    lines = done.stderr.splitlines()
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ work [^ ]+:\d+ ", line) for line in lines), lines
    assert not any(line.startswith("2026-12-01T00:00:00Z work evil:1") for line in lines)
    assert any(
        "job q1\\n2026-12-01T00:00:00Z work evil:1 job payroll: claimed (ready)\\x1b]0;owned\\x07: claimed" in line for line in lines
    )


# --- 7. a right-to-left override cannot spoof the review page ---------------------------------------------------


def test_bidi_controls_on_the_review_page_are_shown_and_every_text_isolated(ws, tmp_path):
    spoof = "Recommend: \u202eTPECCA TON OD\u202c as read, with a zero\u200bwidth space."
    ws.write_manifest(sources={"alpha": spoof + "\nThe report is synthetic test input and describes no real event.\n"})
    ws.start().ok()
    page_path = str(tmp_path / "page.html")
    ws.run("inspect", "--html", page_path).ok()
    page = parse_page(page_path)
    for char in ("\u202e", "\u202c", "\u200b"):
        assert char not in page.raw, f"U+{ord(char):04X} reached the page"
    shown = "Recommend: \\u202eTPECCA TON OD\\u202c as read, with a zero\\u200bwidth space."
    assert shown in page.alltext  # in the summary, the quote, the claim's link and the source
    assert f"<bdi>{shown}</bdi>" in page.raw  # the summary, isolated from what stands around it


# --- 8. a FIFO as a response file never holds the job ----------------------------------------------------------


def test_a_fifo_as_a_response_summary_or_citations_file_is_refused_before_the_lock(ws):
    assert ws.start(env={"DURABLE_JOB_FAKE_CRASH": "after-pending"}).code == 94
    key = ws.db_rows()[0][0]
    fifo = os.path.join(ws.root, "answer.fifo")
    os.mkfifo(fifo)
    before = ws.state_bytes()
    holder = hold_run_lock(ws.state)  # another command holds the job: a refusal that names the file came before the lock
    try:
        reconcile = ws.run(
            "reconcile",
            "--operation-key",
            key,
            "--action",
            "complete",
            "--response-file",
            fifo,
            "--reviewer",
            "r",
            "--reason",
            "x",
            timeout=30,
        )
        reconcile.held("DecisionError", f"Response file {fifo} is not a regular file")
    finally:
        holder.stdin.close()
        holder.wait()
    for flags in (("--summary-file", fifo), ("--summary-file", ws.manifest, "--citations-file", fifo)):
        ws.run("revise", "--item", "alpha", *flags, "--reviewer", "r", "--reason", "x", timeout=30).held("is not a regular file")
    assert ws.state_bytes() == before


# --- 9. verify never runs a program the state names -------------------------------------------------------------


def marker_server(ws: Workspace) -> tuple:
    """An MCP command that leaves a mark each time it is launched, then serves docs://beta (tests/mcp_server.py)."""
    marks = os.path.join(ws.root, "launched.log")
    wrapper = os.path.join(ws.root, "server.py")
    with open(wrapper, "w") as fh:
        fh.write(
            "import os, runpy, sys\n"
            f"open({marks!r}, 'a').write(f'uid={{os.getuid()}}\\n')\n"
            f"sys.argv = [{os.path.join(os.path.dirname(__file__), 'mcp_server.py')!r}, '--log', {os.path.join(ws.root, 'mcp.log')!r}]\n"
            f"runpy.run_path(sys.argv[0], run_name='__main__')\n"
        )
    return [sys.executable, wrapper], marks


def launches(marks: str) -> int:
    return len(open(marks).read().splitlines()) if os.path.exists(marks) else 0


def test_verify_status_inspect_and_jobs_never_launch_the_manifests_mcp_server(ws, tmp_path):
    from conftest import BETA, sha256

    command, marks = marker_server(ws)
    manifest = ws.manifest_dict(sources={"alpha": "STRUCTURAL FIXTURE ONLY: Alpha report requires owner review.\n"})
    manifest["items"].append(
        {"id": "beta", "mcp": {"command": command, "uri": "docs://beta", "timeoutSeconds": 60}, "sha256": sha256(BETA)}
    )
    ws.write_manifest(manifest)
    ws.start().ok()
    assert launches(marks) == 1
    ws.run("decide", "--decision", "hold", "--reviewer", "r", "--reason", "x").ok()
    assert launches(marks) == 2  # deciding re-reads every source: the owner's own machine, the owner's server
    report = ws.run("verify").ok()
    assert report["ok"] is True and launches(marks) == 2
    page = str(tmp_path / "page.html")
    ws.run("status").ok(), ws.run("inspect", "--html", page).ok(), ws.run("jobs", "--root", ws.root, state=False).ok()
    assert launches(marks) == 2
    assert "Source not shown" not in open(page).read().split("id='item1'")[1].split("</section>")[0]  # the kept copy
    # a state directory written before copies were kept: verify says so, as a failed check, and launches nothing
    os.remove(os.path.join(ws.state, "mcp-sources.json"))
    old = ws.run("verify")
    old.held("SealError", "MCP source not kept: not verified offline")
    assert [c["ok"] for c in old.json["checks"] if c["name"] == "seals"] == [False] and launches(marks) == 2
