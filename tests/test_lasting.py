"""A store that lasts (issue 24): `jobs` a page at a time, `submit` of many manifests, and what the calls cost.

Real PostgreSQL (each test its own database), real state directories, the CLI as a person runs it: a page's
`nextPage` is pasted as printed, a bad prices file is one HOLD line, and every number is checked against the
journal's own rows.
"""

import json
import os

import pytest

from conftest import (
    ALPHA,
    BETA,
    PROGRAM,
    Workspace,
    admin_url,
    as_role,
    copy_house,
    in_the_engine,
    new_key_file,
    new_store,
    paste,
)

# --- helpers --------------------------------------------------------------------------------------------------


def desk(tmp_path, store: str, role: str) -> Workspace:
    """A person's folder on a store, as `role` (commands in this process: a listing needs no process of its own)."""
    w = Workspace(tmp_path / f"{role}-desk", store=as_role(store, role))
    return w


def started(w: Workspace, job_id: str, **overrides) -> dict:
    w.write_manifest(jobId=job_id, **overrides)
    return w.start().ok()


def listed(w: Workspace, *flags) -> dict:
    return w.run("jobs", "--store", w.store, *flags).ok()


def ids(out: dict) -> list:
    return [j["jobId"] for j in out["jobs"]]


def every_page(w: Workspace, *flags, limit: int) -> list:
    """Follow the pages as a person does: paste each page's nextPage command as printed."""
    out = listed(w, *flags, "--limit", str(limit))
    pages = [ids(out)]
    while "nextPage" in out:
        assert len(out["jobs"]) == limit and out["nextCursor"] in out["nextPage"]
        out = paste(w, out["nextPage"]).ok()
        pages.append(ids(out))
    assert "nextCursor" not in out
    return pages


def journal_tokens(w: Workspace, job_id: str | None = None) -> dict:
    """A job's tokens, added up here from its journal rows (calls.usage_json)."""
    rows = w.journal("SELECT usage_json FROM calls") if job_id is None else job_rows(w, job_id)
    total = {"input": 0, "output": 0, "total": 0}
    for (usage,) in rows:
        if usage:
            u = json.loads(usage)
            total = {
                "input": total["input"] + u["input_tokens"],
                "output": total["output"] + u["output_tokens"],
                "total": total["total"] + u["total_tokens"],
            }
    return total


def job_rows(w: Workspace, job_id: str) -> list:
    from conftest import store_journal

    return store_journal(w.store, job_id, "SELECT usage_json FROM calls")


PRICES = {
    "schemaVersion": 1,
    "currency": "EUR",
    "models": {"fake-structural-1": {"inputPerMillion": 2.5, "outputPerMillion": 10, "setOn": "2026-11-01"}},
}


def prices_file(folder, data=None, name="prices.json") -> str:
    path = os.path.join(str(folder), name)
    with open(path, "w") as fh:
        fh.write(data if isinstance(data, str) else json.dumps(PRICES if data is None else data))
    return path


def cost_of(tokens: dict) -> float:
    price = PRICES["models"]["fake-structural-1"]
    return round(tokens["input"] * price["inputPerMillion"] / 1e6 + tokens["output"] * price["outputPerMillion"] / 1e6, 6)


# --- 24.1: jobs a page at a time ----------------------------------------------------------------------------------


def test_a_store_lists_its_jobs_a_page_at_a_time_and_the_cursor_holds_while_jobs_are_added(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    alice = desk(tmp_path, store, "alice")
    for n in range(5):
        started(alice, f"job-{n}")
    everything = ids(listed(alice))
    assert everything == [f"job-{n}" for n in range(5)]  # piped, with no --limit: every job, as before
    assert "nextCursor" not in listed(alice)
    assert every_page(alice, limit=2) == [["job-0", "job-1"], ["job-2", "job-3"], ["job-4"]]

    first = listed(alice, "--limit", "2")
    started(alice, "job-5")  # a job sealed between two pages comes after them: nothing is repeated or skipped
    second = paste(alice, first["nextPage"]).ok()
    third = paste(alice, second["nextPage"]).ok()
    assert ids(second) == ["job-2", "job-3"] and ids(third) == ["job-4", "job-5"] and "nextPage" not in third
    assert first["nextPage"].startswith(f"python {PROGRAM} jobs --store {alice.store} --limit 2 --after ")

    text = alice.run("jobs", "--store", alice.store, "--limit", "2", "--text").stdout
    assert "more jobs: the next page is `python " in text and "--after " in text and "TOKENS" in text

    # the filters page too, and the next page keeps them
    alice.run("decide", "--job", "job-1", "--decision", "hold", "--reviewer", "Alice", "--reason", "later").ok()
    alice.run("decide", "--job", "job-3", "--decision", "reject", "--reviewer", "Alice", "--reason", "no").ok()
    alice.run("cancel", "--job", "job-4", "--reviewer", "Alice", "--reason", "not needed").ok()
    assert every_page(alice, "--phase", "decided", limit=1) == [["job-1"], ["job-3"]]
    assert every_page(alice, "--phase", "awaiting-review", "--mine", limit=2) == [["job-0", "job-2"], ["job-5"]]
    assert every_page(alice, "--phase", "cancelled", limit=5) == [["job-4"]]
    assert listed(alice, "--phase", "decided", "--limit", "1")["nextPage"].count("--phase decided") == 1

    empty = Workspace(tmp_path / "admin", store=new_store(pg_server, empty=True))
    assert listed(empty, "--limit", "1") == {"jobs": []}  # a database not set up yet holds no job
    assert empty.run("usage", "--store", empty.store).ok()["total"]["calls"] == 0


def test_a_role_pages_through_only_what_it_may_see_and_a_cursor_is_never_a_way_in(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    alice, bob, carol = (desk(tmp_path, store, r) for r in ("alice", "bob", "carol"))
    started(alice, "a-1", reviewers=["bob"])
    started(alice, "a-2")
    started(bob, "b-1")
    started(alice, "a-3", reviewers=["bob"])
    assert every_page(bob, limit=1) == [["a-1"], ["b-1"], ["a-3"]]  # a-2 names no reviewer: alice's alone
    cursor = listed(alice, "--limit", "1")["nextCursor"]
    assert ids(listed(carol, "--after", cursor)) == []  # carol sees no job, whatever cursor she holds
    assert ids(listed(bob, "--to-review", "--limit", "1")) == ["a-1"]

    for bad in ("not-a-cursor", cursor[:-3], "W10"):
        alice.run("jobs", "--store", alice.store, "--after", bad).held("UsageError", "--after", "nextCursor")
    alice.run("jobs", "--store", alice.store, "--limit", "0").held("UsageError", "--limit 0")
    dirs = Workspace(tmp_path / "dirs" / "one")
    dirs.write_manifest()
    dirs.start().ok()
    dirs.run("jobs", "--root", str(tmp_path / "dirs"), "--after", cursor, state=False).held("UsageError", "not a cursor of this listing")


def test_state_directories_page_the_same_way(tmp_path):
    root = tmp_path / "jobs"
    for n in range(3):
        w = Workspace(root / f"q{n}")
        w.write_manifest(jobId=f"dir-{n}")
        w.start().ok()
    lister = Workspace(tmp_path / "lister")
    out = lister.run("jobs", "--root", str(root), "--limit", "2", state=False).ok()
    assert ids(out) == ["dir-0", "dir-1"] and out["nextPage"].endswith(f"--after {out['nextCursor']}")
    rest = paste(lister, out["nextPage"]).ok()
    assert ids(rest) == ["dir-2"] and "nextCursor" not in rest
    assert ids(lister.run("jobs", "--root", str(root), "--phase", "decided", "--limit", "1", state=False).ok()) == []


# --- 24.2: submit of many manifests -------------------------------------------------------------------------------


def manifests_folder(tmp_path, count: int) -> tuple[Workspace, str]:
    """A folder of `count` manifests (m0.json …) over the same two sources, jobIds sub-0 …."""
    w = Workspace(tmp_path / "requests")
    folder = w.src
    for n in range(count):
        manifest = w.manifest_dict(jobId=f"sub-{n}")
        with open(os.path.join(folder, f"m{n}.json"), "w") as fh:
            json.dump(manifest, fh)
    return w, folder


def test_submit_seals_several_manifests_or_a_folder_each_on_its_own(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    w, folder = manifests_folder(tmp_path, 3)
    w.store = store
    out = w.run("submit", "--store", store, folder).ok()
    assert [s["jobId"] for s in out["submits"]] == ["sub-0", "sub-1", "sub-2"]
    assert all(s["existing"] is False and s["phase"] == "not-started" and s["store"] == store for s in out["submits"])
    again = w.run("submit", "--store", store, os.path.join(folder, "m2.json"), os.path.join(folder, "m1.json")).ok()
    assert [(s["jobId"], s["existing"]) for s in again["submits"]] == [("sub-2", True), ("sub-1", True)]
    single = w.run("submit", "--store", store, "--manifest", os.path.join(folder, "m0.json")).ok()
    assert single["jobId"] == "sub-0" and single["existing"] is True  # one --manifest: the document it always printed
    text = w.run("submit", "--store", store, folder, "--text").stdout
    assert "submit: 3 manifests" in text and "job sub-1:" in text
    w.run("submit", "--store", store, "--job", "sub-0", folder).held("UsageError", "--job names one job")
    w.run("submit", "--store", store, str(tmp_path)).held("UsageError", "holds no *.json manifest")
    w.run("submit", "--store", store).held("UsageError", "submit needs a manifest")


def test_one_bad_manifest_is_named_and_nothing_already_submitted_is_lost(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    w, folder = manifests_folder(tmp_path, 4)
    w.store = store
    with open(os.path.join(folder, "m2.json"), "w") as fh:
        fh.write("{not json")
    w.run("submit", "--store", store, folder).held("ManifestError", "m2.json", "nothing was submitted")
    assert ids(listed(desk(tmp_path, store, "alice"))) == []  # read and checked first: nothing was sealed
    twin = os.path.join(str(tmp_path), "twin.json")
    with open(twin, "w") as fh:
        json.dump(w.manifest_dict(jobId="sub-0"), fh)
    w.run("submit", "--store", store, os.path.join(folder, "m0.json"), twin).held("ManifestError", "both name jobId sub-0")

    manifest = w.manifest_dict(jobId="sub-2")
    manifest["items"][1]["path"] = "other-beta.txt"  # sealed over bytes that changed since: found only while sealing
    w.write_source("other-beta.txt", BETA.replace("Beta", "Bxta"))
    with open(os.path.join(folder, "m2.json"), "w") as fh:
        json.dump(manifest, fh)
    line = w.run("submit", "--store", store, folder).held("SourceError", "m2.json")
    assert "already submitted, and kept: sub-0" in line and "sub-1" in line and "not tried: " in line and "m3.json" in line
    assert ids(listed(desk(tmp_path, store, "alice"))) == ["sub-0", "sub-1"]

    w.write_source("other-beta.txt", BETA)
    out = w.run("submit", "--store", store, folder).ok()
    assert [(s["jobId"], s["existing"]) for s in out["submits"]] == [("sub-0", True), ("sub-1", True), ("sub-2", False), ("sub-3", False)]


# --- 24.3: usage and cost -----------------------------------------------------------------------------------------


def test_tokens_and_an_estimated_cost_show_in_inspect_jobs_and_the_review_page(ws, tmp_path):
    ws.start().ok()
    tokens = journal_tokens(ws)
    assert tokens["total"] > 0  # the fake model reports usage as the provider would
    inspected = ws.run("inspect").ok()
    assert inspected["tokens"] == tokens and "estimatedCost" not in inspected
    prices = prices_file(tmp_path)
    priced = ws.run("inspect", "--prices", prices).ok()
    cost = priced["estimatedCost"]
    assert cost == {
        "amount": cost_of(tokens),
        "currency": "EUR",
        "pricesFile": prices,
        "pricesSetOn": {"fake-structural-1": "2026-11-01"},
        "unpriced": [],
    }
    text = ws.run("inspect", "--prices", prices, "--text").stdout
    assert (
        f"tokens: {tokens['input']:,} input" in text
        and f"estimated cost {cost_of(tokens):.6f} EUR (from prices.json, prices set 2026-11-01)" in text
    )
    page = tmp_path / "review.html"
    ws.run("inspect", "--html", str(page)).ok()
    assert f"tokens: {tokens['input']:,} input · {tokens['output']:,} output · {tokens['total']:,} total" in page.read_text()

    [row] = ws.run("jobs", "--root", ws.root, "--prices", prices, state=False).ok()["jobs"]
    assert row["tokens"] == tokens and row["estimatedCost"]["amount"] == cost_of(tokens)
    table = ws.run("jobs", "--root", ws.root, "--prices", prices, "--text", state=False).stdout
    assert "TOKENS  EST. COST (EUR)" in table and table.splitlines()[1].split()[-2:] == [f"{tokens['total']:,}", f"{cost_of(tokens):.6f}"]
    assert f"costs: estimates from {prices}, not the provider's bill" in table
    ws.run("decide", "--decision", "accept", "--reviewer", "dana", "--reason", "ok").ok()
    receipt = ws.receipt()  # the receipt binds the tokens (no cost: an estimate from a file is not evidence)
    assert receipt["schemaVersion"] == 2 and receipt["tokens"] == tokens and "estimatedCost" not in receipt
    assert ws.run("verify").ok()["ok"] is True
    import durable_job as dj

    path = os.path.join(ws.state, "receipt.json")  # a receipt whose tokens were changed is named by verify
    with open(path) as fh:
        changed = {**json.load(fh), "tokens": {**tokens, "total": tokens["total"] - 1}}
    dj.write_atomic(path, json.dumps(changed).encode())
    failed = ws.run("verify")
    failed.held("receipt.json tokens is")
    assert [c["name"] for c in failed.json["checks"] if not c["ok"]][:1] == ["receipt"]


def test_usage_sums_a_stores_calls_by_owner_model_and_day_for_what_a_role_may_see(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    alice, bob, carol = (desk(tmp_path, store, r) for r in ("alice", "bob", "carol"))
    started(alice, "a-1", reviewers=["bob"])
    started(alice, "a-2")
    started(bob, "b-1", model="fake-other-2")
    a1, a2, b1 = journal_tokens(alice, "a-1"), journal_tokens(alice, "a-2"), journal_tokens(bob, "b-1")

    def usage(w: Workspace, *flags) -> dict:
        return w.run("usage", "--store", w.store, *flags).ok()

    by_owner = usage(alice)
    assert by_owner["by"] == "owner" and [g["owner"] for g in by_owner["groups"]] == ["alice"]  # b-1 is bob's alone
    assert by_owner["total"]["tokens"]["total"] == a1["total"] + a2["total"] and by_owner["total"]["jobs"] == 2
    seen = usage(bob, "--by", "model")
    assert {g["model"]: g["tokens"]["total"] for g in seen["groups"]} == {"fake-other-2": b1["total"], "fake-structural-1": a1["total"]}
    assert usage(carol)["groups"] == [] and usage(carol)["total"]["calls"] == 0
    days = usage(bob, "--by", "day")["groups"]
    assert sum(d["calls"] for d in days) == 4 and all(len(d["day"]) == 10 for d in days)  # the calls' UTC days
    assert usage(bob, "--since", "2999-01-01")["total"]["calls"] == 0

    priced = usage(bob, "--by", "owner", "--prices", prices_file(tmp_path))
    assert priced["total"]["estimatedCost"]["amount"] == cost_of(a1)
    assert priced["total"]["estimatedCost"]["unpriced"] == ["fake-other-2"]  # named, never guessed
    text = bob.run("usage", "--store", bob.store, "--prices", prices_file(tmp_path), "--text").stdout
    assert "EST. COST (EUR)" in text and "no price for fake-other-2" in text and "an estimate from your prices file" in text

    dirs = Workspace(tmp_path / "dirs" / "one")
    dirs.write_manifest(sources={"alpha": ALPHA})
    dirs.start().ok()
    local = dirs.run("usage", "--root", str(tmp_path / "dirs"), "--by", "model", state=False).ok()
    assert local["total"]["tokens"] == journal_tokens(dirs) and local["groups"][0]["model"] == "fake-structural-1"


def test_usage_over_a_folder_counts_the_jobs_encrypted_or_shredded_without_their_key_and_names_one_it_cannot_read(tmp_path):
    """A person sums their folder of jobs with no key at hand: a job encrypted at rest and a shredded one count as any other
    (token counts stay clear, as the contract says); a job whose record is damaged is named, not counted, and the sum
    is still printed (on main the first encrypted or shredded directory stopped it with an EncryptedError)."""
    key = new_key_file(tmp_path)
    desk = tmp_path / "desk"
    plain, encrypted, shredded, damaged = (Workspace(desk / name) for name in ("plain", "encrypted", "shredded", "damaged"))
    for w in (plain, encrypted, shredded, damaged):
        w.write_manifest(sources={"alpha": ALPHA})
        if w is not plain:
            w.env["DURABLE_JOB_KEY_FILE"] = key
        w.start().ok()
    spent = [journal_tokens(w) for w in (plain, encrypted, shredded)]  # read before the shred, from the journal's own rows
    shredded.run("shred").ok()
    with open(os.path.join(damaged.state, "job.json"), "w") as fh:
        fh.write("{")

    reader = Workspace(tmp_path / "reader")  # no DURABLE_JOB_KEY_FILE: what anyone summing the folder has
    out = reader.run("usage", "--root", str(desk), state=False).ok()
    assert out["total"]["jobs"] == 3 and out["total"]["calls"] == 3  # three folders, each its own job, though all are "journey"
    assert out["total"]["tokens"] == {k: sum(t[k] for t in spent) for k in ("input", "output", "total")}
    [unread] = out["unreadable"]
    assert unread["jobId"] == damaged.state and "damaged" in unread["why"], unread
    text = reader.run("usage", "--root", str(desk), "--text", state=False)
    assert text.code == 0 and "HOLD" not in text.stderr, text.stderr
    assert f"unreadable, not counted: {damaged.state}: " in text.stdout and "(all)  3" in text.stdout, text.stdout


def test_jobs_without_the_key_names_an_unreadable_job_s_owner_from_what_stays_clear(tmp_path, pg_server):
    """`jobs` read without the key (or after a shred) lists the job unreadable, and still says whose it is: a store's
    owner and reviewers columns, a state directory's job record (on main: OWNER `-`, the web list `owner None`)."""
    key = new_key_file(tmp_path)
    mine = Workspace(tmp_path / "desk" / "mine")
    mine.write_manifest()
    mine.env["DURABLE_JOB_KEY_FILE"] = key
    mine.start().ok()
    mine.run("shred").ok()
    [row] = Workspace(tmp_path / "reader").run("jobs", "--root", str(tmp_path / "desk"), state=False).ok()["jobs"]
    assert row["phase"] == "unreadable" and row["owner"] == mine.principal() and row["mode"] == "fake" and row["createdAtUtc"]

    store = new_store(pg_server, "alice")
    assert Workspace(tmp_path / "admin").run("migrate", "--store", admin_url(store), "--key-file", key, state=False).ok()["encryptedAtRest"]
    alice = desk(tmp_path, store, "alice")
    alice.env["DURABLE_JOB_KEY_FILE"] = key
    started(alice, "encrypted-1", reviewers=["bob"])
    for role in ("alice", "bob"):  # the owner and the reviewer, each at a desk without the key
        w = desk(tmp_path / "nokey", store, role)
        [row] = listed(w)["jobs"]
        assert row["phase"] == "unreadable" and row["owner"] == "alice" and row["reviewers"] == ["bob"], row
        text = w.run("jobs", "--store", w.store, "--text").stdout
        line = next(line for line in text.splitlines() if line.startswith("encrypted-1"))
        assert line.split()[1:4] == ["unreadable", "alice", "bob"], text


BAD_PRICES = [
    ("{", "not valid JSON"),
    ("[]", "one JSON object"),
    ({**PRICES, "currency": "euro"}, "three-letter code"),
    ({**PRICES, "schemaVersion": True}, "schemaVersion must be 1"),
    ({**PRICES, "extra": 1}, "unknown key 'extra'"),
    ({"schemaVersion": 1, "currency": "EUR"}, "missing key 'models'"),
    ({**PRICES, "models": {}}, "at least one model"),
    (
        {**PRICES, "models": {"m": {"inputPerMillion": -1, "outputPerMillion": 1, "setOn": "2026-11-01"}}},
        "inputPerMillion must be a number",
    ),
    (
        {**PRICES, "models": {"m": {"inputPerMillion": 1, "outputPerMillion": "1", "setOn": "2026-11-01"}}},
        "outputPerMillion must be a number",
    ),
    ({**PRICES, "models": {"m": {"inputPerMillion": 1, "outputPerMillion": 1, "setOn": "2026-13-01"}}}, "setOn must be the date"),
    ({**PRICES, "models": {"m": {"inputPerMillion": 1, "outputPerMillion": 1}}}, "missing key 'setOn'"),
    ({**PRICES, "models": {"m": {"inputPerMillion": 1, "outputPerMillion": 1, "setOn": "2026-11-01", "note": "x"}}}, "unknown key 'note'"),
    ('{"schemaVersion": 1, "schemaVersion": 1}', "duplicate key"),
]


@pytest.mark.parametrize("data, phrase", BAD_PRICES)
def test_a_bad_prices_file_is_one_hold_line(tmp_path, data, phrase):
    w = Workspace(tmp_path / "job")
    w.write_manifest()
    w.start().ok()
    path = prices_file(tmp_path, data)
    for command in (("inspect",), ("jobs", "--root", w.root), ("usage", "--root", w.root)):
        w.run(*command, "--prices", path, state=command[0] == "inspect").held("UsageError", f"--prices {path}", phrase)


def test_a_prices_path_that_is_no_file_is_refused_too(tmp_path):
    w = Workspace(tmp_path / "job")
    w.write_manifest()
    w.start().ok()
    w.run("inspect", "--prices", str(tmp_path / "missing.json")).held("UsageError", "--prices", "cannot be read")
    w.run("inspect", "--prices", str(tmp_path)).held("UsageError", "--prices", "not a regular file")
    w.run("usage", "--root", w.root, "--by", "week", state=False).held("UsageError", "--by")


def test_on_a_terminal_a_page_holds_50_jobs_and_piped_every_job(tmp_path):
    import pty
    import shutil
    import subprocess
    import sys

    from conftest import clean_env

    first = Workspace(tmp_path / "jobs" / "q000")
    first.write_manifest()
    first.start().ok()
    for n in range(1, 51):  # 51 state directories: copies of one job, each a job of its own to list
        shutil.copytree(first.state, tmp_path / "jobs" / f"q{n:03d}" / "state")
    argv = [sys.executable, PROGRAM, "jobs", "--root", str(tmp_path / "jobs")]
    ours, theirs = pty.openpty()
    proc = subprocess.Popen(argv, stdout=theirs, stderr=subprocess.PIPE, env=clean_env(), cwd=str(tmp_path))
    os.close(theirs)
    shown = b""
    while True:
        try:
            chunk = os.read(ours, 65536)
        except OSError:  # the terminal's other end closed: the command is done
            break
        if not chunk:
            break
        shown += chunk
    os.close(ours)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    lines = shown.decode().splitlines()
    assert sum(line.startswith("journey ") for line in lines) == 50
    assert lines[-1].startswith("more jobs: the next page is `python ") and "--limit 50 --after " in lines[-1]
    piped = subprocess.run(argv, capture_output=True, text=True, env=clean_env(), cwd=str(tmp_path), timeout=60)
    assert len(json.loads(piped.stdout)["jobs"]) == 51 and "nextCursor" not in json.loads(piped.stdout)


# -- upgrades: which jobs this program can still act on ------------------------------------------------------------


def test_jobs_names_the_jobs_another_program_sealed_for_it_to_finish(tmp_path):
    """An upgrade strands the jobs the program before it sealed: `jobs` says which, and lists them alone."""
    old = copy_house(tmp_path / "old")  # a release laid out whole: `jobs` is the team's package's command
    with open(old, encoding="utf-8") as fh:
        text = in_the_engine(fh.read(), "# the release before")
    with open(old, "w", encoding="utf-8") as fh:
        fh.write(text)
    before, now = Workspace(tmp_path / "before"), Workspace(tmp_path / "now")
    before.write_manifest(jobId="from-before")
    now.write_manifest(jobId="from-now")
    before.run("start", "--manifest", before.manifest, program=old).ok()
    now.start().ok()
    listed = {r["jobId"]: r["actsHere"] for r in now.run("jobs", "--root", str(tmp_path), state=False).ok()["jobs"]}
    assert listed == {"from-before": False, "from-now": True}
    stranded = now.run("jobs", "--root", str(tmp_path), "--sealed-by-other", state=False).ok()["jobs"]
    assert [r["jobId"] for r in stranded] == ["from-before"]
    assert stranded[0]["sealedBy"]["engineSha256"] == before.run("inspect", program=old).ok()["job"]["engineSha256"]  # finish it with that
    theirs = before.run("jobs", "--root", str(tmp_path), "--sealed-by-other", state=False, program=old).ok()["jobs"]
    assert [r["jobId"] for r in theirs] == ["from-now"]  # the old program, before it is retired, sees the reverse


# -- retention: prune keeps a finished job answerable; delete leaves a tombstone -------------------------------------


def admin_psql(store: str, statement: str) -> str:
    """One statement as the store's administrator, through psql (what an administrator types)."""
    import subprocess

    out = subprocess.run(
        ["psql", "-XAt", "-v", "ON_ERROR_STOP=1", as_role(store, "durable"), "-c", statement], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def thread_rows(store: str, job_id: str) -> int:
    """The job's rows in LangGraph's three checkpoint tables."""
    return int(
        admin_psql(
            store,
            "SELECT (SELECT count(*) FROM durable_job.checkpoints c WHERE c.thread_id = j.thread_id) + "
            "(SELECT count(*) FROM durable_job.checkpoint_blobs b WHERE b.thread_id = j.thread_id) + "
            f"(SELECT count(*) FROM durable_job.checkpoint_writes w WHERE w.thread_id = j.thread_id) FROM durable_job.jobs j WHERE j.job_id = '{job_id}'",
        )
    )


def checkpoint_rows(w: Workspace) -> int:
    """LangGraph's checkpoints and writes of the job's thread, in its journal's file."""
    import sqlite3

    conn = sqlite3.connect(f"file:{os.path.join(w.state, 'effects.sqlite')}?mode=ro", uri=True)
    try:
        return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("checkpoints", "writes"))
    finally:
        conn.close()


def answers_as_before(w: Workspace, before: dict) -> None:
    """A pruned job still answers inspect, jobs and verify as it did (phase, results, decision), saying it was pruned."""
    now = w.run("inspect").ok()
    assert now["pruned"]["prunedUtc"] and now["phase"] == before["phase"] == "decided"
    assert (now["results"], now["resultsSha256"], now["final"], now["drafts"]) == (
        before["results"],
        before["resultsSha256"],
        before["final"],
        before["drafts"],
    )
    assert w.run("verify").ok()["ok"] is True
    w.run("resume").held("DecisionError", "was pruned", "nothing can run or change it")


def as_kept_by_1_1(state: str) -> None:
    """The state directory as release 1.1 kept it: LangGraph's checkpoints in a checkpoints.sqlite of their own."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(os.path.join(state, "checkpoints.sqlite"), check_same_thread=False)
    SqliteSaver(conn).setup()
    conn.execute("ATTACH DATABASE ? AS journal", (os.path.join(state, "effects.sqlite"),))
    for table in ("checkpoints", "writes"):
        conn.execute(f"INSERT INTO main.{table} SELECT * FROM journal.{table}")
        conn.execute(f"DROP TABLE journal.{table}")
    conn.commit()
    conn.close()


def test_a_job_whose_checkpoints_have_a_file_of_their_own_is_read_and_pruned_as_before(tmp_path):
    """A job started by 1.1 (its checkpoints in checkpoints.sqlite) still answers status, inspect and verify, and prune
    frees that whole file."""
    done = Workspace(tmp_path / "done")
    started(done, "older-job")
    done.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "ok").ok()
    before = done.run("inspect").ok()
    as_kept_by_1_1(done.state)
    assert done.run("inspect").ok()["results"] == before["results"]
    assert done.run("status").ok()["phase"] == "decided" and done.run("verify").ok()["ok"] is True
    out = done.run("prune", "--root", str(tmp_path), "--older-than", "0", state=False).ok()
    assert [(j["jobId"], j["state"]) for j in out["jobs"]] == [("older-job", "pruned")] and out["freedBytes"] > 0
    assert not os.path.exists(os.path.join(done.state, "checkpoints.sqlite"))
    answers_as_before(done, before)


def test_prune_of_a_state_directory_frees_its_checkpoints_and_keeps_it_answerable(tmp_path):
    done, waiting = Workspace(tmp_path / "done"), Workspace(tmp_path / "waiting")
    started(done, "done-job")
    done.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "ok").ok()
    started(waiting, "waiting-job")
    before, root = done.run("inspect").ok(), str(tmp_path)
    held, size = checkpoint_rows(done), os.path.getsize(os.path.join(done.state, "effects.sqlite"))
    dry = done.run("prune", "--root", root, "--older-than", "0", "--dry-run", state=False).ok()
    assert [(j["jobId"], j["state"]) for j in dry["jobs"]] == [("done-job", "would prune")] and dry["freedBytes"] > 0
    assert held > 0 and checkpoint_rows(done) == held  # a dry run changes nothing
    assert done.run("prune", "--root", root, "--older-than", "1", state=False).ok()["jobs"] == []  # it finished just now
    out = done.run("prune", "--root", root, "--older-than", "0", state=False).ok()
    assert [(j["jobId"], j["state"]) for j in out["jobs"]] == [("done-job", "pruned")] and out["freedBytes"] == dry["freedBytes"]
    assert checkpoint_rows(done) == 0 and os.path.getsize(os.path.join(done.state, "effects.sqlite")) < size
    answers_as_before(done, before)
    rows = {r["jobId"]: r["phase"] for r in done.run("jobs", "--root", root, state=False).ok()["jobs"]}
    assert rows == {"done-job": "decided", "waiting-job": "awaiting-review"}  # the unfinished job is left whole
    assert waiting.run("verify").ok()["ok"] is True
    assert done.run("prune", "--root", root, "--older-than", "0", state=False).ok()["jobs"] == []  # once is enough


def test_prune_of_a_store_is_the_administrators_and_frees_its_checkpoints(tmp_path, pg_server):
    store = new_store(pg_server, "alice")
    alice = desk(tmp_path, store, "alice")
    started(alice, "finished")
    alice.run("decide", "--decision", "hold", "--reviewer", "Alice", "--reason", "later").ok()
    before = alice.run("inspect").ok()
    for role in ("alice", "bob", "worker"):
        alice.run("prune", "--store", as_role(store, role), "--older-than", "0", state=False).held("StateError", "administrator's")
    assert thread_rows(store, "finished") > 0
    size = "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'durable_job' AND c.relkind = 'r'"
    out = alice.run("prune", "--store", as_role(store, "durable"), "--older-than", "0", state=False).ok()
    assert [(j["jobId"], j["state"]) for j in out["jobs"]] == [("finished", "pruned")] and out["freedBytes"] > 0
    assert thread_rows(store, "finished") == 0 and int(admin_psql(store, size)) > 0
    answers_as_before(alice, before)
    assert [(r["jobId"], r["phase"]) for r in listed(alice)["jobs"]] == [("finished", "decided")]
    bob = desk(tmp_path, store, "bob")
    assert bob.run("inspect", "--job", "finished").held("StateError")  # still bob's to see nothing of


@pytest.mark.parametrize("point,code", [("after-prune-mark", 100), ("after-prune-delete", 101)])
@pytest.mark.parametrize("backend", ["dir", "store"])
def test_a_prune_killed_at_any_point_leaves_the_job_whole_or_marked_and_the_next_prune_finishes_it(
    tmp_path, pg_server, backend, point, code
):
    store = new_store(pg_server, "alice") if backend == "store" else None
    w = desk(tmp_path, store, "alice") if store else Workspace(tmp_path / "job")
    started(w, "kept")
    w.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "ok").ok()
    before = w.run("inspect").ok()
    where = ["--store", as_role(store, "durable")] if store else ["--root", str(tmp_path)]
    killed = w.run("prune", *where, "--older-than", "0", state=False, env={"DURABLE_JOB_FAKE_CRASH": point}, inprocess=False)
    assert killed.code == code
    marked = w.run("inspect").ok()  # marked: it answers from what the mark kept, whole or not
    assert marked["pruned"]["prunedUtc"] is None and marked["results"] == before["results"] and marked["final"] == before["final"]
    assert w.run("verify").ok()["ok"] is True
    again = w.run("prune", *where, "--older-than", "0", state=False).ok()
    assert [(j["jobId"], j["state"]) for j in again["jobs"]] == [("kept", "pruned")]
    answers_as_before(w, before)


def test_delete_is_the_administrators_and_its_tombstone_keeps_the_job_id_taken(tmp_path, pg_server):
    import psycopg

    store = new_store(pg_server, "alice")
    alice = desk(tmp_path, store, "alice")
    started(alice, "gone")
    alice.run("decide", "--decision", "reject", "--reviewer", "Alice", "--reason", "no").ok()
    receipt = json.loads(admin_psql(store, "SELECT receipt_json FROM durable_job.receipts WHERE job_id = 'gone'"))
    for role in ("alice", "bob", "worker"):
        alice.run("delete", "--store", as_role(store, role), "--job", "gone", state=False).held("StateError", "administrator's")
        with psycopg.connect(as_role(store, role), autocommit=True) as conn, pytest.raises(psycopg.Error):
            conn.execute("DELETE FROM durable_job.jobs WHERE job_id = 'gone'")
    out = alice.run("delete", "--store", as_role(store, "durable"), "--job", "gone", state=False).ok()
    import durable_job as dj

    assert out["deleted"] is True and out["tombstone"]["principal"] == "durable"
    assert out["tombstone"]["receiptSha256"] == dj.sha256_hex(dj.canonical(receipt))
    assert admin_psql(store, "SELECT count(*) FROM durable_job.calls WHERE job_id = 'gone'") == "0"
    assert listed(alice)["jobs"] == []
    alice.start().held("ManifestError", "jobId gone is taken")  # the same request again: the id stays taken
    admin = psycopg.connect(as_role(store, "durable"), autocommit=True)  # even the administrator's own INSERT
    with admin as conn, pytest.raises(psycopg.Error, match="was deleted and stays taken"):
        conn.execute(
            "INSERT INTO durable_job.jobs (job_id, thread_id, record_json, manifest, manifest_sha256, sources, created_utc) "
            "VALUES ('gone', 'x', '{}', '', '', '{}', '')"
        )
