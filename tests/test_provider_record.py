"""The provider keeps the record (issue 49, its first slice): a job sealed with providerKeepsRecord sends each Responses
call in background mode (background and store true, its operation key in the metadata) and commits the response id the
moment the provider answers with it (a `submitted` call), before awaiting the answer by that id. A run killed after that
commit leaves nothing uncertain: resume retrieves the same response, sends nothing new, and records that the answer came
from the provider's record. A run killed while the POST was unanswered stays uncertain, as every call did before. Real
SDK, real HTTP, real SIGKILLs; the loopback provider's log (every request, its method and path) is the witness.
"""

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from conftest import (
    ALPHA,
    BOTH,
    PROGRAM,
    RUN_PROGRAM,
    Workspace,
    allowed_signers,
    as_role,
    clean_env,
    kill_group,
    make_key,
    openai_workspace,
    refused,
    wait_for,
)

ONE = {"alpha": ALPHA}


def kept_workspace(ws, provider, sources=None, **overrides):
    return openai_workspace(ws, provider, sources=sources, providerKeepsRecord=True, **overrides)


def posts(provider, path="/v1/responses") -> Counter:
    """The calls sent, by operation key: the POSTs that create a response (a retrieve is a GET, a cancel names its id)."""
    return Counter(r["client_request_id"] for r in provider.requests() if r.get("method") == "POST" and r["path"] == path)


CHAT = "/v1/chat/completions"


def gets(provider) -> list:
    return [r["path"].rsplit("/", 1)[1] for r in provider.requests() if r.get("method") == "GET"]


def journaled(ws) -> list:
    """The job's calls, none before the run made its journal (a state directory's) or sealed its job (a store's)."""
    made = ws.has_job() if ws.store is not None else os.path.exists(os.path.join(ws.state, "effects.sqlite"))
    return ws.calls() if made else []


def submitted(ws) -> list:
    """The calls submitted and not yet answered: pending, with the response id the provider answered the POST with."""
    return [r for r in journaled(ws) if r["status"] == "pending" and r["response_id"]]


def left_submitted(ws, provider, *said: str) -> dict:
    """A kept one-item job whose start gave up waiting (a 1-s timeout) on a response the provider holds: the start's
    HOLD says it stays submitted (and `said`), and the call is pending with its response id; that row."""
    kept_workspace(ws, provider, sources=ONE)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "1"
    provider.behave("kept-held")
    ws.start().held(*said, "stays submitted")
    [row] = submitted(ws)
    return row


@BOTH
def test_a_job_with_the_record_kept_reaches_review_each_call_sent_once_in_background_mode(ws, provider):
    """Two items: each call POSTed exactly once, background and stored, its operation key in the metadata and in the
    X-Client-Request-Id header; its id committed (a `submitted` event before `completed`), its answer retrieved by that
    id; inspect shows each call's response id and when it was submitted; the job verifies."""
    kept_workspace(ws, provider)
    out = ws.start().ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    rows = ws.calls()
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert posts(provider) == {r["operation_key"]: 1 for r in rows}
    for request in (r for r in provider.requests() if r.get("method") == "POST"):
        assert request["store"] is True and request["background"] is True
        assert request["metadata"] == {"durable_job_operation_key": request["client_request_id"]}
    assert set(gets(provider)) == {r["response_id"] for r in rows}  # the answers came by their ids
    submits = []
    for row in rows:
        assert row["response_id"].startswith("resp_")
        assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch", "submitted", "completed"]
        [submit] = ws.events(row["operation_key"], "submitted")
        assert submit["detail"]["responseId"] == row["response_id"] and submit["detail"]["submittedAtUtc"] <= submit["at_utc"]
        submits.append((row["response_id"], submit["detail"]["submittedAtUtc"]))
    calls = ws.run("inspect").ok()["calls"]
    assert [(c["responseId"], c["submittedUtc"]) for c in calls] == submits
    assert not any(c.get("fromProviderRecord") for c in calls)
    assert ws.run("verify").ok()["ok"] is True


@BOTH
def test_a_run_killed_after_the_id_is_committed_is_completed_by_resume_from_the_provider_record(ws, provider):
    """SIGKILL while the provider is still making the answer, its id committed: status says the job is ready (nothing is
    uncertain, no person is needed); resume retrieves the same response (a GET by its id, no second POST), records it
    completed beside a `retrieved` event, inspect marks the call fromProviderRecord, and the job verifies."""
    kept_workspace(ws, provider, sources=ONE)
    provider.behave("kept-held")
    run = ws.popen("start", "--manifest", ws.manifest)
    try:
        [row] = wait_for(lambda: submitted(ws), timeout=30)
    finally:
        kill_group(run)
    status = ws.run("status").ok()
    assert status["phase"] == "ready" and status["calls"][0][2] == "pending" and "resume" in status["next"]
    provider.release()
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated"]
    [done] = ws.calls()
    assert (done["status"], done["response_id"], done["attempt"]) == ("completed", row["response_id"], 1)
    assert posts(provider) == {row["operation_key"]: 1}  # nothing was sent twice
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch", "submitted", "completed", "retrieved"]
    [call] = ws.run("inspect").ok()["calls"]
    assert call["fromProviderRecord"] is True and call["responseId"] == row["response_id"]
    assert ws.run("verify").ok()["ok"] is True


@BOTH
def test_a_run_killed_before_the_provider_answered_the_post_stays_uncertain(ws, provider):
    """SIGKILL while the POST is unanswered (the provider holds it): no id was committed, so the call is uncertain as
    every call was before: status says so, resume refuses to send it again, and the provider saw one POST."""
    kept_workspace(ws, provider, sources=ONE)
    provider.behave("hang")
    run = ws.popen("start", "--manifest", ws.manifest)
    try:
        wait_for(lambda: posts(provider), timeout=30)
        wait_for(lambda: journaled(ws), timeout=30)
    finally:
        kill_group(run)
    [row] = ws.calls()
    assert row["status"] == "pending" and row["response_id"] is None and not ws.events(row["operation_key"], "submitted")
    assert ws.run("status").ok()["phase"] == "uncertain-call"
    provider.behave("ok")
    ws.run("resume").held("UNCERTAIN_CALL", row["operation_key"])
    assert posts(provider) == {row["operation_key"]: 1}


def test_without_the_opt_in_every_request_is_stored_false_and_not_in_background(ws, provider):
    openai_workspace(ws, provider)
    ws.start().ok()
    requests = provider.requests()
    assert len(requests) == 2
    assert all(r["store"] is False and r["background"] is None and r["metadata"] is None for r in requests)
    assert not ws.events(event="submitted")
    assert "providerKeepsRecord" not in ws.job()


def test_a_response_the_provider_ends_failed_is_a_refusal_and_the_next_attempt_goes_out(ws, provider):
    kept_workspace(ws, provider, sources=ONE)
    provider.behave(sequence=["kept-fail"])
    ws.start().held("Provider refused the call for item alpha", "failed at the provider", "recorded as rejected")
    [row] = ws.calls()
    assert row["status"] == "rejected" and ws.events(row["operation_key"], "submitted")
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated"]
    assert [(r["attempt"], r["status"]) for r in ws.calls()] == [(1, "rejected"), (2, "completed")]
    assert sum(posts(provider).values()) == 2 and ws.run("verify").ok()["ok"] is True


def test_an_answer_not_back_in_time_stays_submitted_and_resume_retrieves_it(ws, provider):
    """The provider still makes the answer when the run's wait ends: the HOLD says the call stays submitted (no person
    reconciles it); once the provider finishes, resume records its answer with no second POST."""
    row = left_submitted(ws, provider, "did not come back", "run resume")
    assert ws.run("status").ok()["phase"] == "ready"
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch", "submitted", "error"]
    provider.release()
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
    assert posts(provider) == {row["operation_key"]: 1}
    assert ws.run("verify").ok()["ok"] is True


def test_cancel_of_a_job_whose_call_is_submitted_cancels_the_response_at_the_provider(ws, provider):
    row = left_submitted(ws, provider)
    out = ws.run("cancel", "--reviewer", "rev", "--reason", "not needed").ok()
    assert out["cancelledAtProvider"] == [{"operationKey": row["operation_key"], "responseId": row["response_id"], "status": "cancelled"}]
    cancels = [r for r in provider.requests() if r["path"].endswith("/cancel")]
    assert [c["path"] for c in cancels] == [f"/v1/responses/{row['response_id']}/cancel"]
    assert ws.events(row["operation_key"], "provider-cancel")[0]["detail"]["status"] == "cancelled"
    assert ws.run("verify").ok()["ok"] is True


def test_the_manifest_key_is_checked_and_seal_writes_it(ws, provider):
    ws.write_manifest(ws.manifest_dict(mode="openai", model="gpt-test", providerKeepsRecord="yes"))
    ws.start().held("providerKeepsRecord must be true or false")
    ws.write_manifest(ws.manifest_dict(providerKeepsRecord=True))
    ws.start().held("providerKeepsRecord applies to mode openai")
    out = os.path.join(ws.root, "sealed.json")
    source = ws.write_source("alpha.txt", ALPHA)
    base = ["seal", "--out", out, "--job-id", "kept", "--approved-by", "o@example.test", "--model", "gpt-test", source]
    ws.run(*base, "--mode", "openai", "--provider-transfer-approved", "--provider-keeps-record").ok()
    with open(out) as fh:
        assert json.load(fh)["providerKeepsRecord"] is True
    held = ws.run(*base, "--mode", "fake", "--provider-keeps-record", "--force").held("--provider-keeps-record")
    assert "mode openai" in held


@BOTH
def test_a_chat_job_with_the_record_kept_stores_each_completion_under_its_operation_key(ws, provider):
    """Chat Completions with the record kept: each request is stored (store true) with its operation key in the
    metadata, sent once, and the job reaches review and verifies; nothing is looked up when nothing was lost."""
    kept_workspace(ws, provider, api="chat")
    assert [r["status"] for r in ws.start().ok()["results"]] == ["validated", "validated"]
    rows = ws.calls()
    assert posts(provider, CHAT) == {r["operation_key"]: 1 for r in rows}
    for request in provider.requests():
        assert request["method"] == "POST" and request["store"] is True
        assert request["metadata"] == {"durable_job_operation_key": request["client_request_id"]}
    assert all(r["status"] == "completed" for r in rows) and not ws.events(event="submitted")
    assert ws.run("verify").ok()["ok"] is True


def kill_while_unanswered(ws, provider, behaviour: str, **overrides) -> dict:
    """Start a one-item kept chat job whose POST the provider never answers; SIGKILL it once the POST is logged."""
    kept_workspace(ws, provider, sources=ONE, api="chat", **overrides)
    provider.behave(behaviour)
    run = ws.popen("start", "--manifest", ws.manifest)
    try:
        wait_for(lambda: posts(provider, CHAT), timeout=30)
        wait_for(lambda: journaled(ws), timeout=30)
    finally:
        kill_group(run)
    [row] = ws.calls()
    status = ws.run("status").ok()
    assert row["status"] == "pending" and status["phase"] == "uncertain-call"
    assert "first looks it up among the provider's stored completions" in status["next"]
    provider.behave("ok")
    return row


@BOTH
def test_a_chat_call_killed_before_its_answer_is_completed_by_the_lookup_of_its_stored_completion(ws, provider):
    """The provider stored the completion but the run was killed before the answer came: resume lists the stored
    completions carrying the call's operation key, finds exactly one, and records it (no second POST, no person)."""
    row = kill_while_unanswered(ws, provider, "stored-hang")
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
    [done] = ws.calls()
    assert done["status"] == "completed" and done["response_id"].startswith("chatcmpl-")
    assert posts(provider, CHAT) == {row["operation_key"]: 1}
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch", "looked-up", "completed", "retrieved"]
    assert ws.events(row["operation_key"], "looked-up")[0]["detail"] == {"found": 1, "responseIds": [done["response_id"]]}
    assert ws.run("inspect").ok()["calls"][0]["fromProviderRecord"] is True
    assert ws.run("verify").ok()["ok"] is True


def test_a_chat_call_the_provider_did_not_store_stays_uncertain_and_the_listing_is_recorded(ws, provider):
    row = kill_while_unanswered(ws, provider, "hang")
    ws.run("resume").held("UNCERTAIN_CALL", row["operation_key"])
    assert ws.events(row["operation_key"], "looked-up")[0]["detail"] == {"found": 0, "responseIds": []}
    assert ws.calls()[0]["status"] == "pending" and posts(provider, CHAT) == {row["operation_key"]: 1}


def test_two_stored_completions_under_one_key_stop_the_run_and_none_is_taken(ws, provider):
    row = kill_while_unanswered(ws, provider, "stored-twice-hang")
    held = ws.run("resume").held("stored 2 completions under operation key", "reconcile")
    assert row["operation_key"] in held
    assert ws.calls()[0]["status"] == "pending" and ws.calls()[0]["response_id"] is None
    assert ws.events(row["operation_key"], "looked-up")[0]["detail"]["found"] == 2


def test_a_worker_killed_after_the_id_is_committed_leaves_the_job_for_the_next_worker_to_finish(tmp_path, store_url, provider):
    """A store's worker is SIGKILLed while the provider makes a kept call's answer: the job is ready, not uncertain, so
    the next worker takes it on and records the answer retrieved by its id: no person, no second POST."""
    ws = Workspace(tmp_path, store=store_url)
    kept_workspace(ws, provider, sources=ONE)
    assert ws.run("submit", "--manifest", ws.manifest, "--store", store_url, state=False).ok()["phase"] == "not-started"
    provider.behave("kept-held")
    env = {**clean_env(), **ws.env}
    argv = [sys.executable, RUN_PROGRAM, PROGRAM, "work", "--store", as_role(store_url, "worker"), "--until-idle"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        [row] = wait_for(lambda: submitted(ws), timeout=60)
    finally:
        kill_group(first)
    assert ws.run("status").ok()["phase"] == "ready"
    provider.release()
    second = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["counts"] == {"awaiting-review": 1}
    assert posts(provider) == {row["operation_key"]: 1}
    assert [e["event"] for e in ws.events(row["operation_key"])] == ["dispatch", "submitted", "completed", "retrieved"]
    assert ws.run("verify").ok()["ok"] is True


def test_reconcile_from_provider_completes_an_uncertain_chat_call_from_its_stored_completion(ws, provider):
    """A person settles the uncertain call on demand: reconcile --from-provider lists the stored completions carrying its
    key, records the one found as the call's answer (the record says so) and resume goes on, with nothing sent again."""
    row = kill_while_unanswered(ws, provider, "stored-hang")
    key = row["operation_key"]
    argv = ("reconcile", "--operation-key", key, "--action", "complete", "--from-provider", "--reviewer", "bob", "--reason", "kept")
    out = ws.run(*argv).ok()
    assert out["status"] == "completed" and out["reconciliation"]["fromProvider"]["found"] == 1
    [done] = ws.calls()
    assert done["response_id"] == out["reconciliation"]["fromProvider"]["responseId"]
    assert [e["event"] for e in ws.events(key)] == ["dispatch", "looked-up", "reconciled"]
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
    assert posts(provider, CHAT) == {key: 1} and ws.run("verify").ok()["ok"] is True


def test_reconcile_from_provider_that_finds_nothing_records_the_listing_and_changes_nothing(ws, provider):
    row = kill_while_unanswered(ws, provider, "hang")
    key = row["operation_key"]
    argv = ("reconcile", "--operation-key", key, "--action", "complete", "--from-provider", "--reviewer", "bob", "--reason", "kept")
    ws.run(*argv).held("found 0 stored completions", key, "--response-file")
    assert ws.calls()[0]["status"] == "pending"
    assert ws.events(key, "looked-up")[0]["detail"]["found"] == 0
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--from-provider", "--reviewer", "b", "--reason", "x").held(
        "--from-provider", "--action complete"
    )


@BOTH
def test_a_signed_reconcile_from_the_providers_record_records_its_lookup_with_it_and_verifies_strictly(ws, provider, tmp_path):
    """reconcile --from-provider --sign-key: the lookup's finding and the reconcile it completes are one act, above the
    chain head the key signed (the lookup's event, the outcome, the reconciled event); verify --strict checks it as its
    principal's."""
    row = kill_while_unanswered(ws, provider, "stored-hang")
    key = row["operation_key"]
    dana = make_key(tmp_path, "dana")
    argv = ("reconcile", "--operation-key", key, "--action", "complete", "--from-provider", "--reviewer", "Dana", "--reason", "kept")
    record = ws.run(*argv, "--sign-key", dana).ok()["reconciliation"]
    assert record["fromProvider"]["found"] == 1 and record["signature"]["format"] == "sshsig"
    head = record["signature"]["chainHead"]["seq"]
    links = "links" if ws.store is None else "durable_job.links"  # the store's: this job's, the only one
    above = [(r[0], r[1]) for r in ws.journal(f"SELECT act, tbl FROM {links} WHERE seq > {head} ORDER BY seq")]
    assert above == [("event", "call_events"), ("outcome", "calls"), ("event", "call_events")]
    assert [e["event"] for e in ws.events(key)] == ["dispatch", "looked-up", "reconciled"]
    signers = allowed_signers(tmp_path, "signers", (ws.principal(), dana, ""))
    checks = {c["name"]: c for c in ws.run("verify", "--strict", "--allowed-signers", signers).ok()["checks"]}
    assert checks["signatures"]["detail"] == f"reconciliation signed by {ws.principal()}, verified"
    assert posts(provider, CHAT) == {key: 1}


# A launcher that loads durable_job.py unchanged and SIGKILLs the process just before or just after the commit it names:
# the kept call's id (submit_call) or its answer (complete_call), the two commits around the wait at the provider.
KILL_AROUND_A_COMMIT = r"""
import importlib.util, os, signal, sys

spec = importlib.util.spec_from_file_location("durable_job", {program!r})
dj = importlib.util.module_from_spec(spec)
sys.modules["durable_job"] = dj
spec.loader.exec_module(dj)
when = os.environ["KILL_WHEN"]


def around(name):
    real = getattr(dj, name)

    def wrapped(*args, **kwargs):
        if when == "before-" + name:
            os.kill(os.getpid(), signal.SIGKILL)
        out = real(*args, **kwargs)
        if when == "after-" + name:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    setattr(dj, name, wrapped)


around("submit_call")
around("complete_call")
sys.exit(dj.main(sys.argv[1:]))
"""
KILL_POINTS = [  # (api, where the run is killed, what status then says of the job)
    (None, "before-submit_call", "uncertain-call"),  # the provider answered the POST; its id is not committed
    (None, "after-submit_call", "ready"),
    (None, "before-complete_call", "ready"),  # the answer retrieved, not yet committed
    (None, "after-complete_call", "ready"),
    ("chat", "before-complete_call", "uncertain-call"),  # the completion stored at the provider, not yet committed
    ("chat", "after-complete_call", "ready"),
]


@BOTH
@pytest.mark.parametrize("api, when, phase", KILL_POINTS, ids=[f"{a or 'responses'}-{w}" for a, w, _ in KILL_POINTS])
def test_a_kill_at_each_commit_of_a_kept_call_never_sends_it_twice_and_resume_settles_what_it_can(ws, provider, tmp_path, api, when, phase):
    """SIGKILL right before or after each commit around a kept call: the provider's log shows the call sent exactly once;
    every kill after the id's commit (and every chat kill, its completion stored) ends completed with no person; the
    one before a Responses call's id is committed stays uncertain; every job verifies."""
    kept_workspace(ws, provider, sources=ONE, **({"api": api} if api else {}))
    killer = os.path.join(str(tmp_path), "kill_around_a_commit.py")
    with open(killer, "w", encoding="utf-8") as fh:
        fh.write(KILL_AROUND_A_COMMIT.format(program=PROGRAM))
    assert ws.start(program=killer, env={"KILL_WHEN": when}).code == -signal.SIGKILL
    assert ws.run("status").ok()["phase"] == phase
    [row] = ws.calls()
    path = CHAT if api else "/v1/responses"
    if phase == "uncertain-call" and not api:
        ws.run("resume").held("UNCERTAIN_CALL", row["operation_key"])
        assert ws.run("verify").ok()["ok"] is True
    else:
        assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
        [done] = ws.calls()
        assert done["status"] == "completed" and ws.run("verify").ok()["ok"] is True
        recovered = when != "after-complete_call"  # the answer recorded by resume, from the provider's record
        assert bool(ws.events(row["operation_key"], "retrieved")) == recovered
    assert posts(provider, path) == {row["operation_key"]: 1}


def test_reconcile_from_provider_takes_a_submitted_responses_answer_by_its_id(ws, provider):
    row = left_submitted(ws, provider)
    provider.release()
    key = row["operation_key"]
    out = ws.run("reconcile", "--operation-key", key, "--action", "complete", "--from-provider", "--reviewer", "b", "--reason", "k").ok()
    assert out["reconciliation"]["fromProvider"] == {"found": 1, "responseId": row["response_id"]}
    assert ws.events(key, "looked-up")[0]["detail"] == {"found": 1, "responseIds": [row["response_id"]], "by": "reconcile"}
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
    assert posts(provider) == {key: 1} and ws.run("verify").ok()["ok"] is True


def test_a_store_refuses_a_submitted_calls_response_id_swapped_by_the_owners_role(ws_store, provider):
    """m026_submitted: the run's submit (its event first, then the id) is what the store accepts; the owner's own role
    cannot swap a submitted call's response id afterwards."""
    ws = ws_store
    row = left_submitted(ws, provider)
    swap = "UPDATE durable_job.calls SET response_id = 'resp_other' WHERE job_id = %s AND operation_key = %s"
    assert "takes a response id once, beside its submitted event" in refused(ws.store, swap, (ws.job_id(), row["operation_key"]))
    assert submitted(ws)[0]["response_id"] == row["response_id"]


def test_a_response_the_provider_lost_is_said_so_and_a_person_abandons_it(ws, provider):
    """The provider answers the POST, then has no such response (404): the HOLD says so and names the person's step;
    abandoned, the next attempt goes out and the job reaches review."""
    kept_workspace(ws, provider, sources=ONE)
    provider.behave(sequence=["kept-lost"])
    ws.start().held("no longer has response", "HTTP 404", "reconcile")
    [row] = submitted(ws)
    key = row["operation_key"]
    ws.run("reconcile", "--operation-key", key, "--action", "abandon", "--reviewer", "bob", "--reason", "lost at the provider").ok()
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
    assert [(r["attempt"], r["status"]) for r in ws.calls()] == [(1, "abandoned"), (2, "completed")]
    assert ws.run("verify").ok()["ok"] is True
