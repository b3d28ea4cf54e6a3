"""Setting a team up (issue 45, item 6): each step says what it did, and each mistake a person makes while setting up
is named by its likely cause, not by the message that hides it.

Real PostgreSQL with password roles (a pgpass file of the test's own where a line must match), real `serve`, `seal`,
`migrate` and `status` processes for every refusal (exit 2, one HOLD line, no traceback), the loopback provider for
answers that state figures.
"""

import getpass
import json
import os
import subprocess
import sys

import pytest
import test_figures
import test_web
from test_notify import notify_config

from conftest import (
    PROGRAM,
    RUN_PROGRAM,
    Workspace,
    admin_url,
    as_role,
    assert_held,
    clean_env,
    free_port,
    new_key_file,
    new_store,
    openai_workspace,
    sql,
)

serving = test_web.serving  # the fixture that starts serves and stops them after each test


def run(cwd, *args, env=None, timeout=60) -> subprocess.CompletedProcess:
    """One command as a person types it, in a process of its own."""
    return subprocess.run(
        [sys.executable, RUN_PROGRAM, PROGRAM, *args],
        capture_output=True,
        text=True,
        env={**clean_env(), **(env or {})},
        cwd=str(cwd),
        timeout=timeout,
    )


def held(proc: subprocess.CompletedProcess, *phrases) -> str:
    return assert_held(proc.returncode, proc.stdout, proc.stderr, *phrases)


def without_role(url: str) -> str:
    """The store's URL as the docs write serve's: no ROLE@ (people sign in with their own)."""
    head, _, rest = url.partition("://")
    return f"{head}://{rest.split('@', 1)[1]}"


# -- serve --notify ---------------------------------------------------------------------------------------------------


def test_serve_notify_with_a_url_naming_no_role_refuses_at_start_naming_the_role_it_would_deliver_as(tmp_path, store_url, serving):
    """The docs' `serve --store postgresql://HOST/DB` with a notification config: its sender would log in as the
    login name, which has no password here (on main it printed its address and served on, delivering nothing)."""
    config = notify_config(tmp_path, free_port())
    login = os.environ.get("PGUSER") or getpass.getuser()
    bare = run(tmp_path, "serve", "--port", "0", "--store", without_role(store_url), "--notify", config, timeout=30)
    line = held(bare, "serve --notify cannot deliver", f"role {login}", "the URL names no ROLE@", "PGPASSFILE", "worker1@HOST")
    assert "no password" in line and "open http" not in bare.stdout + bare.stderr

    # the fix the line names: the worker's role in the URL, its password from PGPASSFILE: serve starts and serves
    served = serving(tmp_path, "--store", as_role(store_url, "worker"), "--notify", config, env={"PGPASSFILE": os.environ["PGPASSFILE"]})
    assert served.proc.poll() is None and served.address.startswith("http://127.0.0.1:")


# -- migrate ----------------------------------------------------------------------------------------------------------


def test_migrate_says_in_words_that_every_new_job_will_now_be_encrypted_and_whose_jobs_it_adopted(pg_server, tmp_path):
    url = new_store(pg_server)
    key = new_key_file(tmp_path)
    admin = admin_url(url)
    first = run(tmp_path, "migrate", "--store", admin, "--key-file", key, "--text")
    assert first.returncode == 0, first.stderr
    assert "every new job will now be encrypted" in first.stdout, first.stdout
    again = run(tmp_path, "migrate", "--store", admin, "--key-file", key, "--text")
    assert "already up to date" in again.stdout and "encryption at rest is on" in again.stdout
    assert "every new job is encrypted" in again.stdout and "will now be encrypted" not in again.stdout
    adopted = run(tmp_path, "migrate", "--store", admin, "--owner", "alice", "--text")
    assert "0 jobs of the administrator's now owned by alice" in adopted.stdout, adopted.stdout


def test_migrate_run_again_says_it_had_nothing_to_do_and_grants_only_what_a_role_lacked(pg_server, tmp_path):
    """The administrator runs the README's migrate line twice, as a person does to be sure: the second run says the
    store is already at its latest migration and that alice and the worker already had their rights, with nothing
    done (on main it said "granted alice use of it" again). A right revoked by hand is granted again, and said so."""
    admin = admin_url(new_store(pg_server, empty=True))
    line = ("migrate", "--store", admin, "--grant", "alice", "--grant-worker", "worker", "--text")
    first = run(tmp_path, *line)
    assert first.returncode == 0, first.stderr
    assert "brought up to date (at m0" in first.stdout and "granted alice use of it\n" in first.stdout, first.stdout
    assert "granted worker use of it as a worker" in first.stdout
    again = run(tmp_path, *line)
    assert again.returncode == 0, again.stderr
    assert "already up to date (at m0" in again.stdout and "; nothing to do" in again.stdout, again.stdout
    assert "alice already had use of it: nothing changed" in again.stdout and "worker already had use of it as a worker" in again.stdout
    assert "granted " not in again.stdout.replace("granted roles keep CONNECT", ""), again.stdout
    document = json.loads(run(tmp_path, *line[:-1]).stdout)
    assert document["granted"] == [] and document["alreadyGranted"] == ["alice"] and document["alreadyGrantedWorkers"] == ["worker"]
    assert document["latestMigration"] == again.stdout.split("(at ", 1)[1].split(")", 1)[0]

    sql(admin, "REVOKE INSERT ON durable_job.drafts FROM alice")  # by hand, outside migrate
    repaired = run(tmp_path, *line)
    assert "granted alice use of it\n" in repaired.stdout and "worker already had use of it as a worker" in repaired.stdout, repaired.stdout
    assert "nothing to do" not in repaired.stdout


# -- start and resume: figures found nowhere --------------------------------------------------------------------------


def test_start_and_resume_say_how_many_figures_were_found_nowhere(tmp_path, provider):
    one = openai_workspace(Workspace(tmp_path / "one"), provider, sources={"alpha": test_figures.BOILER})
    provider.behave(test_figures.answer("It saves about 9 percent of gas.", (test_figures.QUOTE, "Saves gas.")))
    started = one.run("start", "--manifest", one.manifest, "--text")
    assert started.code == 0, started.stderr
    assert "  1 figure found nowhere in the sources: `" in started.stdout and "inspect" in started.stdout, started.stdout
    assert "1 figure found nowhere" in one.run("resume", "--text").stdout

    two = openai_workspace(Workspace(tmp_path / "two"), provider, sources={"alpha": test_figures.BOILER})
    provider.behave(test_figures.answer("It saves 9 percent, or $800.", (test_figures.QUOTE, "Saves gas.")))
    assert "  2 figures found nowhere in the sources" in two.run("start", "--manifest", two.manifest, "--text").stdout

    none = openai_workspace(Workspace(tmp_path / "none"), provider, sources={"alpha": test_figures.BOILER})
    provider.behave(test_figures.answer("It saves roughly 8 percent of gas.", (test_figures.QUOTE, "8% a year.")))
    assert "found nowhere" not in none.run("start", "--manifest", none.manifest, "--text").stdout


# -- seal -------------------------------------------------------------------------------------------------------------


def seal_args(out, *more) -> list:
    return ["seal", "--out", str(out), "--job-id", "set-up", "--approved-by", "owner@example.test", "--mode", "fake"] + [
        "--model",
        "fake-structural-1",
        *more,
    ]


def test_seal_writes_every_optional_key_and_the_item_ids_a_person_names(tmp_path):
    ws = Workspace(tmp_path)
    a, b = ws.write_source("q3 report (final).txt", "Alpha.\n"), ws.write_source("notes.txt", "Beta.\n")
    sealed = run(
        tmp_path,
        *seal_args(ws.manifest, "--figures-must-be-quoted", "--review-checks-every-claim", "--id", f"q3={a}", a, b),
    )
    assert sealed.returncode == 0, sealed.stderr
    manifest = json.loads(open(ws.manifest).read())
    assert manifest["figuresMustBeQuoted"] is True and manifest["reviewChecksEveryClaim"] is True
    assert [i["id"] for i in manifest["items"]] == ["q3", "notes"]
    assert ws.start().ok()["interrupt"]  # the job those keys seal runs

    plain = run(tmp_path, *seal_args(tmp_path / "plain.json", b))
    assert "figuresMustBeQuoted" not in open(tmp_path / "plain.json").read(), plain.stderr
    held(run(tmp_path, *seal_args(tmp_path / "x.json", "--id", "q3=other.txt", b)), "--id", "not among the source files")
    held(run(tmp_path, *seal_args(tmp_path / "x.json", "--id", "q3", b)), "must be ITEM=PATH")
    held(run(tmp_path, *seal_args(tmp_path / "x.json", "--mcp-timeout", "5", b)), "--mcp-timeout", "needs --mcp-uri")
    assert not os.path.exists(tmp_path / "x.json")


def test_seal_force_refuses_before_writing_over_the_manifest_a_started_job_sealed(ws):
    ws.write_manifest()
    assert ws.start().ok()["interrupt"]
    before = open(ws.manifest, "rb").read()
    again = run(ws.root, *seal_args(ws.manifest, "--force", os.path.join(ws.src, "alpha.txt")))
    held(again, "is the manifest job journey", ws.state, "--out NEW.json")
    assert open(ws.manifest, "rb").read() == before
    assert ws.run("resume").ok()["interrupt"]  # the job is whole
    elsewhere = run(ws.root, *seal_args(os.path.join(ws.src, "next.json"), "--force", os.path.join(ws.src, "alpha.txt")))
    assert elsewhere.returncode == 0, elsewhere.stderr


@pytest.mark.parametrize("ws", ["store"], indirect=True)
def test_seal_force_refuses_before_writing_over_the_manifest_a_store_job_of_that_id_sealed(ws):
    assert ws.start().ok()["interrupt"]
    before = open(ws.manifest, "rb").read()
    again = [*seal_args(ws.manifest, "--force", "--store", ws.store, os.path.join(ws.src, "alpha.txt"))]
    again[again.index("set-up")] = "journey"  # the store's job that sealed this file
    held(run(ws.root, *again), "is the manifest job journey in store ", "--out NEW.json", "a new --job-id")
    assert open(ws.manifest, "rb").read() == before
    assert ws.run("resume").ok()["interrupt"]  # the job is whole
    elsewhere = [os.path.join(ws.src, "next.json") if a == ws.manifest else a for a in again]
    assert run(ws.root, *elsewhere).returncode == 0


# -- a store's address: the cause the server's message hides ----------------------------------------------------------


def test_a_wrong_database_name_is_named_whichever_message_the_server_gives(tmp_path, store_url):
    """With a pgpass line for the right database only, libpq says 'no password supplied'; with a password that fits
    any database, the server says the database does not exist: both lines name the database."""
    head, _, rest = store_url.rpartition("/")
    wrong = f"{head}/jbos"
    found = held(run(tmp_path, "status", "--store", wrong, "--job", "j"), "the database jbos is not on that server", "/DBNAME")
    assert "does not exist" in found

    role_at, host = store_url.split("://", 1)[1].split("/", 1)[0].split("@")
    password = next(line.rstrip("\n").split(":", 4)[4] for line in open(os.environ["PGPASSFILE"]) if line.split(":")[3] == role_at)
    exact = tmp_path / "pgpass"
    exact.write_text(f"{host}:{rest}:{role_at}:{password}\n")  # host:port:dbname:role:password, for the right database alone
    exact.chmod(0o600)
    line = held(run(tmp_path, "status", "--store", wrong, "--job", "j", env={"PGPASSFILE": str(exact)}), "no password supplied")
    assert f"no password was found for role {role_at}" in line and "a wrong database or role name in the URL matches no line" in line
    assert f"{host}:jbos:{role_at}:PASSWORD" in line and password not in line
    reached = run(tmp_path, "status", "--store", store_url, "--job", "j", env={"PGPASSFILE": str(exact)})
    assert reached.returncode == 2 and "cannot be reached" not in reached.stderr, reached.stderr  # the right name: its line fits


def test_a_url_of_another_database_kind_is_refused_as_not_postgresql(tmp_path):
    line = held(run(tmp_path, "status", "--store", "mysql://alice@db.internal/jobs", "--job", "j"), "mysql:// is not one")
    assert "only postgresql:// and postgres:// URLs" in line and "keyword string" not in line
    held(run(tmp_path, "status", "--store", "host=db.internal user=alice", "--job", "j"), "keyword string")
