"""Fork (issue 50): a revised job pays only for what changed. A finished (decided) job is forked into a new, approved
job; each item whose call would have exactly the input of one of the old job's completed, validated, provider-made
answers reuses it (journaled `reused`: the old job, its operation key, the answer's sha256; nothing sent), and every other
item runs as usual. The loopback provider's own request log counts what was sent; the journal says what was reused."""

import json
import os
import re
import shutil
import sqlite3

import pytest
from test_web import root_browser, serving  # noqa: F401 (a fixture)

import durable_job
from conftest import (
    BOTH,
    Workspace,
    as_,
    as_role,
    copy_house,
    copy_program,
    file_bytes,
    in_the_engine,
    kill_group,
    new_key_file,
    openai_workspace,
    pg_dump,
    wait_for,
)

SOURCES = {
    "alpha": "Alpha report, first edition.\nIt names two synthetic figures and no real event.\n",
    "beta": "Beta report, the wrong version.\nIt was replaced by a corrected copy.\n",
    "gamma": "Gamma report, first edition.\nIt describes a synthetic meeting.\n",
}
CORRECTED = "Beta report, the corrected version.\nIt is the one the reviewer asked for.\n"


def held_job(ws: Workspace, provider, sources=None, **overrides) -> Workspace:
    """A 3-item openai job run to review and held by bob: the old job every fork here starts from."""
    openai_workspace(ws, provider, sources=sources or SOURCES, **overrides)
    ws.start().ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "beta was the wrong version").ok()
    return ws


def revised(tmp_path, old: Workspace, name: str = "v2", sources=None, **overrides) -> Workspace:
    """The owner's corrected copy: a new folder, its own sources and manifest (a new jobId), its own state directory."""
    new = Workspace(tmp_path / name, store=old.store)
    new.env = dict(old.env)
    manifest = new.manifest_dict(
        sources=sources or {**SOURCES, "beta": CORRECTED}, mode="openai", model="gpt-test", jobId=f"journey-{name}"
    )
    manifest.update(overrides)
    new.write_manifest(manifest)
    return new


def fork(new: Workspace, old: Workspace):
    """The owner's fork (refused: the Result); on a store it is submitted, and the store's worker runs it to its review.
    Its document, with the fork's status once it ran."""
    if old.store is None:
        return new.run("fork", "--from", old.state, "--manifest", new.manifest)
    submitted = new.run("fork", "--from", old.job_id(), "--manifest", new.manifest)
    if submitted.code != 0:
        return submitted
    out = submitted.ok()
    assert out["phase"] == "not-started" and "waiting for a worker" in out["next"]
    run_worker(new).ok()
    return Ran({**new.run("status").ok(), "forkedFrom": out["forkedFrom"], "reusable": out["reusable"]})


def run_worker(ws: Workspace):
    worker = Workspace(ws.root, store=as_role(ws.store, "worker"))
    worker.env = dict(ws.env)
    return worker.run("work", "--store", worker.store, "--until-idle", state=False)


class Ran:
    def __init__(self, out: dict):
        self.out = out

    def ok(self) -> dict:
        return self.out


def item_events(ws: Workspace) -> list:
    """Each call event of the job as (item, event), sorted: what was dispatched, completed and reused for which item."""
    items = {r["operation_key"]: r["item_id"] for r in ws.journal("SELECT operation_key, item_id FROM calls")}
    return sorted((items[r["operation_key"]], r["event"]) for r in ws.journal("SELECT operation_key, event FROM call_events"))


def item_calls(provider, since: int) -> list:
    """The items each request after the first `since` was for (its prompt's Item line)."""
    sent = []
    for logged in provider.requests()[since:]:
        text = json.dumps(logged["input"])
        sent.append(next(i for i in ("alpha", "beta", "gamma") if f"Item: {i}" in text))
    return sent


@BOTH
def test_a_held_job_forked_with_one_source_corrected_calls_that_item_alone_and_both_verify(tmp_path, ws, provider):
    old = held_job(ws, provider)
    before = len(provider.requests())
    assert before == 3
    new = revised(tmp_path, old)
    out = fork(new, old).ok()
    assert out["forkedFrom"] == "journey" and sorted(out["reusable"]) == ["alpha", "beta", "gamma"]
    assert item_calls(provider, before) == ["beta"], "only the changed item is sent"
    assert [r["status"] for r in out["results"]] == ["validated"] * 3
    seen = new.run("inspect").ok()
    reused = [c for c in seen["calls"] if "reused" in c]
    assert sorted(c["itemId"] for c in reused) == ["alpha", "gamma"]
    assert {c["reused"]["fromJob"] for c in reused} == {"journey"}
    old_keys = {r["item_id"]: r["operation_key"] for r in old.journal("SELECT item_id, operation_key FROM calls")}
    assert {c["itemId"]: c["reused"]["operationKey"] for c in reused} == {i: old_keys[i] for i in ("alpha", "gamma")}
    assert seen["forkedFrom"]["jobId"] == "journey" and seen["forkedFrom"]["decision"] == "hold"
    assert (seen["forkedFrom"]["reusedAnswers"], seen["forkedFrom"]["newCalls"]) == (2, 1)
    assert new.job()["forkedFrom"]["receiptSha256"] == sha256_of(receipt_bytes(old))
    text = new.run("inspect", "--text").stdout
    assert "forked from journey (held by bob: beta was the wrong version), 2 answers reused, 1 new call" in text
    assert new.run("verify").ok()["ok"] is True
    assert old.run("verify").ok()["ok"] is True
    listing = ["--store", old.store] if old.store is not None else ["--root", str(tmp_path)]
    rows = {r["jobId"]: r for r in new.run("jobs", *listing).ok()["jobs"]}
    assert rows["journey"]["forks"] == ["journey-v2"] and rows["journey-v2"]["forkedFrom"] == "journey"
    text = new.run("jobs", *listing, "--text").stdout
    assert "journey: forked into journey-v2" in text and "journey-v2: forked from journey" in text
    assert len(provider.requests()) == before + 1, "inspect, verify and jobs send nothing"


@BOTH
def test_a_fork_with_nothing_changed_sends_nothing_and_its_review_is_its_own(tmp_path, ws, provider):
    old = held_job(ws, provider)
    new = revised(tmp_path, old, sources=SOURCES)
    assert sorted(fork(new, old).ok()["reusable"]) == ["alpha", "beta", "gamma"]
    assert len(provider.requests()) == 3, "every answer reused: nothing sent"
    seen = new.run("inspect").ok()
    assert seen["phase"] == "awaiting-review", "the fork waits for its own review: nothing of the old decision carries over"
    assert (seen["forkedFrom"]["reusedAnswers"], seen["forkedFrom"]["newCalls"]) == (3, 0)
    assert seen["final"] is None and seen["resultsSha256"] == old.run("inspect").ok()["resultsSha256"]
    new.run("decide", "--decision", "accept", "--reviewer", "bob", "--reason", "the same answers, checked again").ok()
    assert new.run("verify").ok()["ok"] is True


def test_abandoned_and_hand_reconciled_answers_are_never_reused_their_items_are_called_again(tmp_path, ws, provider):
    """gamma's call is dropped and abandoned (its one attempt spent: it fails); beta's is dropped and completed by a
    person from the provider's log: neither is the provider's own completed answer, so the fork calls both again."""
    openai_workspace(ws, provider, sources=SOURCES, maxAttemptsPerItem=1)
    provider.behave(sequence=["ok", "drop"])
    ws.start()
    [beta] = [r for r in ws.calls() if r["item_id"] == "beta"]
    answer = os.path.join(ws.root, "answer.json")
    with open(answer, "w") as fh:
        logged = provider.requests()[1]
        json.dump({"outputText": logged["output_text"], "responseId": logged["response_id"]}, fh)
    reconcile = ("reconcile", "--operation-key", beta["operation_key"], "--reviewer", "ops", "--reason", "in the log")
    ws.run(*reconcile, "--action", "complete", "--response-file", answer).ok()
    provider.behave(sequence=["ok", "ok", "drop"])  # the log's numbering goes on: its third line is gamma's
    ws.run("resume")
    [gamma] = [r for r in ws.calls() if r["item_id"] == "gamma"]
    ws.run("reconcile", "--operation-key", gamma["operation_key"], "--reviewer", "ops", "--reason", "lost", "--action", "abandon").ok()
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated", "failed"]
    ws.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "gamma failed").ok()
    before = len(provider.requests())
    new = revised(tmp_path, ws, sources=SOURCES, maxAttemptsPerItem=1)
    provider.behave("ok")
    out = fork(new, ws).ok()
    assert out["reusable"] == ["alpha"]
    assert sorted(item_calls(provider, before)) == ["beta", "gamma"]
    assert [r["status"] for r in out["results"]] == ["validated"] * 3
    assert new.run("verify").ok()["ok"] is True


@pytest.mark.parametrize("phase", ["awaiting-review", "cancelled"])
def test_a_job_not_finished_is_not_forked_and_nothing_is_sealed(tmp_path, ws, provider, phase):
    openai_workspace(ws, provider, sources=SOURCES)
    ws.start().ok()  # awaiting review: not decided
    if phase == "cancelled":
        ws.run("cancel", "--reviewer", "bob", "--reason", "the wrong sources").ok()
    new = revised(tmp_path, ws)
    fork(new, ws).held(f"journey is {phase}, not finished", "only a decided job")
    assert not new.has_job() and len(provider.requests()) == 3


def test_a_fork_run_again_from_another_old_job_is_refused(tmp_path, ws, provider):
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    fork(new, old).ok()
    other = held_job(Workspace(tmp_path / "other"), provider, jobId="other")
    refused = new.run("fork", "--from", other.state, "--manifest", new.manifest)
    refused.held("journey-v2", "is already there (a fork of job journey), not a fork of job other")
    assert len(provider.requests()) == 7


@pytest.mark.parametrize("what", ["no job there", "same job id", "manifest not approved"])
def test_bad_fork_inputs_are_one_line_holds_naming_the_fix(tmp_path, ws, provider, what):
    old = held_job(ws, provider)
    new = revised(tmp_path, old, **({"jobId": "journey"} if what == "same job id" else {}))
    if what == "manifest not approved":
        new.write_manifest({**json.loads(open(new.manifest).read()), "approved": False})
    origin = os.path.join(str(tmp_path), "nowhere") if what == "no job there" else old.state
    held = new.run("fork", "--from", origin, "--manifest", new.manifest).held()
    expected = {"no job there": "there is no job in", "same job id": "give it a jobId of its own", "manifest not approved": "approved"}
    assert expected[what] in held
    assert not new.has_job() and len(provider.requests()) == 3


def sha256_of(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def receipt_bytes(ws: Workspace) -> bytes:
    """The job's receipt as the job keeps it (receipt.json, or the store's row)."""
    if ws.store is None:
        with open(os.path.join(ws.state, "receipt.json"), "rb") as fh:
            return fh.read()
    with ws.pg_store() as store:
        return store.read_receipt()


@pytest.mark.parametrize("ws", ["store"], indirect=True)
def test_carol_cannot_fork_a_job_she_cannot_read_and_a_worker_cannot_fork_at_all(tmp_path, ws, provider):
    old = held_job(ws, provider)
    carol = as_(revised(tmp_path, old), "carol", tmp_path)
    carol.env = dict(old.env)
    carol.run("fork", "--from", "journey", "--manifest", carol.manifest).held("no job 'journey'", "that role carol may read")
    worker = as_(revised(tmp_path, old, name="v3"), "worker", tmp_path)
    worker.env = dict(old.env)
    worker.run("fork", "--from", "journey", "--manifest", worker.manifest).held("Role worker may not seal jobs", "a worker runs jobs")
    with ws.pg_store() as store:
        assert store.for_job("journey-v2").has_job() is False and store.for_job("journey-v3").has_job() is False
    assert len(provider.requests()) == 3


def fork_check(ws: Workspace, *flags) -> dict:
    out = ws.run("verify", *flags)
    [check] = [c for c in json.loads(out.stdout)["checks"] if c["name"] == "fork"]
    return {**check, "verified": json.loads(out.stdout)["ok"]}


def test_verify_checks_each_reused_answer_against_the_old_journal_and_says_plainly_when_it_is_not_at_hand(tmp_path, ws, provider):
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    fork(new, old).ok()
    check = fork_check(new)
    assert check["ok"] and check["detail"].startswith("2 reused answers, each exactly job journey's row")
    moved = os.path.join(str(tmp_path), "archive", "state")
    shutil.move(old.state, moved)  # the old job is no longer where the fork found it
    check = fork_check(new)
    assert check["ok"] and check["verified"] and "not checked against it: that job is not at hand here" in check["detail"]
    assert fork_check(new, "--from", moved)["detail"].startswith("2 reused answers, each exactly")
    gamma = new.journal("SELECT detail_json FROM call_events WHERE event = 'reused'")
    old_key = next(json.loads(r[0])["operationKey"] for r in gamma if json.loads(r[0])["operationKey"].endswith(":1"))
    with sqlite3.connect(os.path.join(moved, "effects.sqlite")) as db:  # someone rewrites the old answer
        db.execute("UPDATE calls SET output_text = output_text || ' ' WHERE operation_key = ?", (old_key,))
    check = fork_check(new, "--from", moved)
    assert not check["ok"] and not check["verified"] and f"{old_key} is not the answer reused: it was changed" in check["detail"]
    with sqlite3.connect(os.path.join(moved, "effects.sqlite")) as db:  # or removes it
        db.execute("DELETE FROM calls WHERE operation_key = ?", (old_key,))
    assert f"{old_key} is gone" in fork_check(new, "--from", moved)["detail"]
    other = os.path.join(str(tmp_path), "v2", "state")
    assert "holds job journey-v2, not job journey" in fork_check(new, "--from", other)["detail"]


@pytest.mark.parametrize("ws", ["store"], indirect=True)
def test_a_stores_fork_is_checked_against_the_old_job_in_the_same_store(tmp_path, ws, provider):
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    fork(new, old).ok()
    check = fork_check(new)
    assert check["ok"] and check["detail"].startswith("2 reused answers, each exactly job journey's row")


FAKE = {"mode": "fake", "model": "fake-structural-1", "providerTransferApproved": False}


@pytest.mark.parametrize("point", ["after-seal", "after-fork-seal", "after-fork-record", "after-reuse", "after-validate", "before-review"])
def test_a_fork_killed_at_each_crash_point_sends_nothing_twice_reuses_nothing_twice_and_verifies(tmp_path, ws, point):
    """A real process ends at the point (as SIGKILL would end it); the same fork command run again finishes the job."""
    ws.write_manifest(sources=SOURCES)
    ws.start().ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "beta was the wrong version").ok()
    new = revised(tmp_path, ws, **FAKE)
    killed = new.run("fork", "--from", ws.state, "--manifest", new.manifest, env={"DURABLE_JOB_FAKE_CRASH": point})
    assert killed.code == durable_job.CRASH_POINTS[point] and killed.stdout == ""
    if point in ("after-seal", "after-fork-seal"):  # the new job has no record of what it may reuse: a resume sends nothing
        new.run("resume").held("whose reusable answers were not recorded", "run the same fork command again")
        assert not os.path.exists(os.path.join(new.state, "effects.sqlite")) or new.db_rows() == []
    out = new.run("fork", "--from", ws.state, "--manifest", new.manifest).ok()
    assert [r["status"] for r in out["results"]] == ["validated"] * 3
    assert item_events(new) == [("alpha", "reused"), ("beta", "completed"), ("beta", "dispatch"), ("gamma", "reused")]
    assert len(new.calls()) == 3
    assert new.run("verify").ok()["ok"] is True


HALL = "The community hall is on Mill Street.\n"
RIVER = "The community hall is on Mill Street, by the river.\n"


def hall_answer(quote: str) -> str:
    citation = {"quote": quote.strip(), "claim": "The hall's street is named."}
    none = {"stated": False}
    return json.dumps(
        {"itemId": "hall", "summary": "The hall is on Mill Street.", "citations": [citation], "facts": {"day": none, "time": none}}
    )


@pytest.mark.parametrize("changed", ["hall", "nothing", "question"])
def test_a_drafting_fork_sends_the_writer_again_only_when_what_it_reads_changed(tmp_path, provider, changed):
    """The hall's source corrected: its answer (and so the evidence) changed, so the hall and the writer are sent, the
    workshop reused. Nothing changed: nothing sent. The question reworded: it is in every item's input and the writer's,
    so every call is sent again."""
    from test_writer import FACTS, QUESTION, WORKSHOP, item_answer, writer_answer

    old = openai_workspace(
        Workspace(tmp_path / "v1"), provider, sources={"workshop": WORKSHOP, "hall": HALL}, question=QUESTION, facts=FACTS, draft=True
    )
    behaviour = {"<<<EVIDENCE": f"answer:{writer_answer(('The day is Saturday.', ['E2']))}", "by the river": f"answer:{hall_answer(RIVER)}"}
    provider.behave(f"answer:{item_answer()}", by_input={**behaviour, "Item: hall": f"answer:{hall_answer(HALL)}"})
    assert old.start().ok()["interrupt"]
    old.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "the hall's address is incomplete").ok()
    assert len(provider.requests()) == 3
    sources = {"workshop": WORKSHOP, "hall": RIVER if changed == "hall" else HALL}
    question = "On which day, and at what hour, is the pottery workshop?" if changed == "question" else QUESTION
    new = revised(tmp_path, old, sources=sources, question=question, facts=FACTS, draft=True)
    out = fork(new, old).ok()
    assert sorted(out["reusable"], key=len) == ["hall", "workshop", durable_job.WRITER_ID]
    sent = [
        ("writer" if r["instructions"] == durable_job.WRITER_SYSTEM else json.dumps(r["input"]).split("Item: ")[1][:4])
        for r in provider.requests()[3:]
    ]
    assert sent == {"hall": ["hall", "writer"], "nothing": [], "question": ["work", "hall", "writer"]}[changed]
    seen = new.run("inspect").ok()
    assert seen["answer"]["draft"]["status"] == "validated"
    assert seen["forkedFrom"]["reusedAnswers"] == {"hall": 1, "nothing": 3, "question": 0}[changed]
    assert new.run("verify").ok()["ok"] is True


def test_answers_encrypted_at_rest_are_reused_only_with_the_key_and_stay_encrypted_in_the_fork(tmp_path, ws, provider):
    key = new_key_file(tmp_path)
    ws.env["DURABLE_JOB_KEY_FILE"] = key
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    del new.env["DURABLE_JOB_KEY_FILE"]
    fork(new, old).held("encrypted at rest")
    assert not new.has_job() and len(provider.requests()) == 3
    new.env["DURABLE_JOB_KEY_FILE"] = key
    out = fork(new, old).ok()
    assert sorted(out["reusable"]) == ["alpha", "beta", "gamma"] and item_calls(provider, 3) == ["beta"]
    stored = b"".join(file_bytes(new.state).values())
    assert b"Alpha report, first edition" not in stored and b"Gamma report" not in stored, "the reused answers are sealed in the fork too"
    assert new.run("verify").ok()["ok"] is True


def test_progress_is_left_out_of_what_reuse_compares_so_calls_made_at_once_are_reused_one_by_one(tmp_path, ws, provider):
    """The old job's items ran three at once (each prompt's progress block empty), the fork's one by one (each names the
    items before it): the prompts differ only in that block, which reuse_sha256 replaces, so all three are reused."""
    old = held_job(ws, provider, maxConcurrentCalls=3)
    new = revised(tmp_path, old, sources=SOURCES)
    fork(new, old).ok()
    assert len(provider.requests()) == 3
    assert [c.get("reused", {}).get("fromJob") for c in new.run("inspect").ok()["calls"]] == ["journey"] * 3
    prompt = durable_job.model_input(
        {"id": "beta", "sha256": "0" * 64}, "text", [{"status": "validated", "itemId": "alpha", "sourceSha256": "1" * 64}]
    )
    job = {"model": "gpt-test"}
    assert durable_job.input_sha256(job, prompt) != durable_job.input_sha256(
        job, durable_job.model_input({"id": "beta", "sha256": "0" * 64}, "text", [])
    )
    assert durable_job.reuse_sha256(job, prompt) == durable_job.reuse_sha256(
        job, durable_job.model_input({"id": "beta", "sha256": "0" * 64}, "text", [])
    )


@pytest.mark.parametrize("ws", ["store"], indirect=True)
def test_a_stores_fork_killed_before_its_record_is_held_by_the_worker_and_finished_by_the_same_fork_again(tmp_path, ws):
    ws.write_manifest(sources=SOURCES)
    ws.start().ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "beta was the wrong version").ok()
    new = revised(tmp_path, ws, **FAKE)
    killed = new.run("fork", "--from", "journey", "--manifest", new.manifest, env={"DURABLE_JOB_FAKE_CRASH": "after-fork-seal"})
    assert killed.code == durable_job.CRASH_POINTS["after-fork-seal"]
    held = run_worker(new)  # the worker sends nothing and holds the job, saying why
    assert held.code == 2 and "HOLD: JobError: work held 1 job" in held.stderr and "whose reusable answers were not recorded" in held.stderr
    assert new.calls() == [] and new.run("status").ok()["phase"] == "ready"
    again = new.run("fork", "--from", "journey", "--manifest", new.manifest).ok()
    assert again["existing"] is True and sorted(again["reusable"]) == ["alpha", "beta", "gamma"]
    run_worker(new).ok()
    assert item_events(new) == [("alpha", "reused"), ("beta", "completed"), ("beta", "dispatch"), ("gamma", "reused")]
    assert new.run("verify").ok()["ok"] is True


def test_a_fork_killed_with_sigkill_while_its_new_call_is_in_flight_sends_nothing_twice_and_reuses_nothing_twice(tmp_path, ws, provider):
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    provider.behave("ok", by_input={"the corrected version": "hang"})  # the provider takes beta's call and never answers
    proc = new.popen("fork", "--from", old.state, "--manifest", new.manifest)
    wait_for(lambda: len(provider.requests()) == 4, timeout=60)
    kill_group(proc)  # SIGKILL: beta's call is in flight, alpha's answer already reused
    assert item_events(new) == [("alpha", "reused"), ("beta", "dispatch")]
    again = new.run("fork", "--from", old.state, "--manifest", new.manifest)
    key = re.search(r"UNCERTAIN_CALL beta ([0-9a-f]{64}:1)", again.held("UncertainCall")).group(1)
    assert len(provider.requests()) == 4, "the uncertain call is never sent again"
    answer = provider.response_file(provider.requests()[3], os.path.join(str(tmp_path), "beta.json"))
    new.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--response-file",
        answer,
        "--reviewer",
        "ops",
        "--reason",
        "in the log",
    ).ok()
    out = new.run("fork", "--from", old.state, "--manifest", new.manifest).ok()
    assert out["existing"] is True and [r["status"] for r in out["results"]] == ["validated"] * 3
    assert len(provider.requests()) == 4
    assert item_events(new) == [("alpha", "reused"), ("beta", "dispatch"), ("beta", "reconciled"), ("gamma", "reused")]
    assert new.run("verify").ok()["ok"] is True


def test_answers_another_engine_made_are_never_reused(tmp_path, ws, provider):
    """The old job was sealed and run by another release whose engine differs (one line in it): the same prompts, but
    not the same engine, so the fork calls every item again."""
    other = copy_house(tmp_path / "release")
    copy_program(tmp_path / "release", in_the_engine)
    openai_workspace(ws, provider, sources=SOURCES)
    ws.run("start", "--manifest", ws.manifest, program=other).ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "checked", program=other).ok()
    new = revised(tmp_path, ws, sources=SOURCES)
    assert fork(new, ws).ok()["reusable"] == []
    assert item_calls(provider, 3) == ["alpha", "beta", "gamma"]
    assert not any("reused" in c for c in new.run("inspect").ok()["calls"])


def test_an_answer_a_reviewer_revised_by_hand_is_not_reused(tmp_path, ws, provider):
    """alpha's summary was rewritten by the reviewer: what they reviewed is not the model's answer, so it is asked again."""
    openai_workspace(ws, provider, sources=SOURCES)
    ws.start().ok()
    summary = ws.write_source("summary.txt", "Alpha report, first edition, as the reviewer put it.")
    ws.run("revise", "--item", "alpha", "--summary-file", summary, "--reviewer", "bob", "--reason", "clearer").ok()
    ws.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "beta was the wrong version").ok()
    new = revised(tmp_path, ws, sources=SOURCES)
    assert sorted(fork(new, ws).ok()["reusable"]) == ["beta", "gamma"]
    assert item_calls(provider, 3) == ["alpha"]


@BOTH
def test_a_fork_running_its_calls_at_once_reuses_the_unchanged_answers_and_sends_the_changed_one(tmp_path, ws, provider):
    old = held_job(ws, provider)
    new = revised(tmp_path, old, maxConcurrentCalls=3)
    fork(new, old).ok()
    assert item_calls(provider, 3) == ["beta"]
    assert item_events(new) == [("alpha", "reused"), ("beta", "completed"), ("beta", "dispatch"), ("gamma", "reused")]
    assert new.run("verify").ok()["ok"] is True


def test_the_review_page_of_a_fork_names_its_old_job_and_what_it_reused(tmp_path, ws, provider, serving):  # noqa: F811
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    fork(new, old).ok()
    page = root_browser(serving(tmp_path, "--root", str(tmp_path), env=provider.env())).get("/jobs/journey-v2").text
    assert "Forked from journey (held by bob: beta was the wrong version): 2 answers reused, 1 new call" in page


@pytest.mark.parametrize("table", ["calls", "outcomes"])
def test_a_reused_answer_or_the_fork_record_rewritten_in_the_fork_fails_its_verify(tmp_path, ws, provider, table):
    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    fork(new, old).ok()
    [(key,)] = new.journal("SELECT operation_key FROM call_events WHERE event = 'reused' ORDER BY id LIMIT 1")
    with sqlite3.connect(os.path.join(new.state, "effects.sqlite")) as db:
        if table == "calls":
            db.execute(
                "UPDATE calls SET output_text = replace(output_text, 'first edition', 'second edition') WHERE operation_key = ?", (key,)
            )
        else:
            db.execute("UPDATE outcomes SET record_json = replace(record_json, 'first edition', 'second edition') WHERE kind = 'fork'")
    out = new.run("verify")
    assert out.code != 0
    failed = {c["name"]: c["detail"] for c in json.loads(out.stdout)["checks"] if not c["ok"]}
    if table == "calls":
        assert "is not the answer its reused event names" in failed["events"]
    assert "outcomes row fork does not fit" in failed["chain"] if table == "outcomes" else "calls row" in failed["chain"]


def test_an_encrypted_stores_fork_reuses_answers_with_the_key_and_its_dump_holds_none_of_them(pg_server, tmp_path, provider):
    from test_encrypted import encrypted_store

    url, key = encrypted_store(pg_server, tmp_path)
    old = Workspace(tmp_path / "job", store=url)
    old.env["DURABLE_JOB_KEY_FILE"] = key
    held_job(old, provider)
    new = revised(tmp_path, old)
    out = fork(new, old).ok()
    assert sorted(out["reusable"]) == ["alpha", "beta", "gamma"] and item_calls(provider, 3) == ["beta"]
    assert new.run("verify").ok()["ok"] is True
    dump = pg_dump(pg_server, url, str(tmp_path / "store.sql"))
    assert b"journey-v2" in dump and b"Alpha report, first edition" not in dump and b"Gamma report" not in dump


@BOTH
def test_the_fork_in_words_says_what_it_reused_and_nothing_leaks_from_the_code(tmp_path, ws, provider):
    from test_words import leaks

    old = held_job(ws, provider)
    new = revised(tmp_path, old)
    origin = old.job_id() if old.store is not None else old.state
    said = new.run("fork", "--from", origin, "--manifest", new.manifest, "--text").stdout
    assert "forked from journey: 3 answers of it may be reused" in said
    assert ("waiting for a worker" in said) if old.store is not None else ("awaiting review" in said)
    listing = ["--store", old.store] if old.store is not None else ["--root", str(tmp_path)]
    for text in (said, new.run("inspect", "--text").stdout, new.run("jobs", *listing, "--text").stdout, new.run("verify", "--text").stdout):
        assert leaks(text) == [], text


def test_a_fork_of_a_fork_reuses_the_answers_it_reused_and_verifies_against_the_job_it_forked(tmp_path, ws, provider):
    old = held_job(ws, provider)
    middle = revised(tmp_path, old)
    fork(middle, old).ok()
    middle.run("decide", "--decision", "hold", "--reviewer", "bob", "--reason", "one more look").ok()
    last = revised(tmp_path, middle, name="v3")
    assert sorted(fork(last, middle).ok()["reusable"]) == ["alpha", "beta", "gamma"]
    assert len(provider.requests()) == 4, "the fork of the fork sends nothing"
    assert {c["reused"]["fromJob"] for c in last.run("inspect").ok()["calls"]} == {"journey-v2"}
    assert fork_check(last)["detail"].startswith("3 reused answers, each exactly job journey-v2's row")
