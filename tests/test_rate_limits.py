"""Rate limits spend nothing (issue 48): a provider's 429 (or a 503 with Retry-After) says it did not run the request,
so the attempt is recorded with the provider's answer (a `rate-limited` event beside the removed pending row) but is not
counted against maxAttemptsPerItem or maxModelCalls; the program waits as long as the provider asks, within the job's
maxRateLimitWaitSeconds, and sends the same attempt again under a new pending row. A 429 that says the account's quota
is exhausted (insufficient_quota) is a refusal, as before. Real SDK, real HTTP, the loopback provider's log as witness.
"""

import time

import pytest

import durable_job
from conftest import ALPHA, BETA, BOTH, GAMMA, openai_workspace

THREE = {"alpha": ALPHA, "beta": BETA, "gamma": GAMMA}


@BOTH
@pytest.mark.parametrize("api", [None, "chat"])
def test_a_three_item_job_rate_limited_three_times_reaches_review_with_no_attempt_spent(ws, provider, api):
    """The provider answers 429 with Retry-After: 1 to the first three requests: with maxAttemptsPerItem 1 and
    maxModelCalls 3 every item is still validated, each item's one attempt went out under one operation key, and the
    journal holds exactly three calls, all completed; each 429 is a `rate-limited` event with what the provider said."""
    openai_workspace(ws, provider, sources=THREE, maxAttemptsPerItem=1, maxModelCalls=3, **({"api": api} if api else {}))
    provider.behave(sequence=["429-retry:1"] * 3)
    began = time.monotonic()
    out = ws.start().ok()
    assert time.monotonic() - began >= 3  # it waited as the provider asked, once per 429
    assert [r["status"] for r in out["results"]] == ["validated"] * 3
    rows = ws.calls()
    assert [(r["item_id"], r["attempt"], r["status"]) for r in rows] == [
        ("alpha", 1, "completed"),
        ("beta", 1, "completed"),
        ("gamma", 1, "completed"),
    ]
    requests = provider.requests()
    assert [r["behaviour"] for r in requests] == ["429-retry:1"] * 3 + ["ok"] * 3
    assert [r["client_request_id"] for r in requests[:4]] == [rows[0]["operation_key"]] * 4  # the same attempt, sent again
    limited = ws.events(rows[0]["operation_key"], "rate-limited")
    assert len(limited) == 3
    assert all(e["detail"]["httpStatus"] == 429 and e["detail"]["retryAfterSeconds"] == 1 for e in limited)
    assert "Rate limit reached" in limited[0]["detail"]["message"]
    assert [e["event"] for e in ws.events(rows[0]["operation_key"])] == ["dispatch", "rate-limited"] * 3 + ["dispatch", "completed"]
    assert ws.run("verify").ok()["ok"] is True


@pytest.mark.parametrize(
    "behaviour, seconds",
    [("429-retry-ms:1500", 1.5), ("503-retry:1", 1), ("429-retry-reset:1s", 1), ("429", 1)],
    ids=["retry-after-ms", "503-retry-after", "x-ratelimit-reset", "no-header-backoff"],
)
def test_each_way_a_provider_says_how_long_to_wait_is_waited_and_nothing_is_spent(ws, provider, behaviour, seconds):
    openai_workspace(ws, provider, sources={"alpha": ALPHA}, maxAttemptsPerItem=1, maxModelCalls=1)
    provider.behave(sequence=[behaviour])
    assert [r["status"] for r in ws.start().ok()["results"]] == ["validated"]
    [row] = ws.calls()
    [event] = ws.events(row["operation_key"], "rate-limited")
    assert event["detail"]["retryAfterSeconds"] == seconds and row["attempt"] == 1


def test_a_503_without_retry_after_is_an_unknown_outcome_as_before(ws, provider):
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    provider.behave(sequence=["503"])
    ws.start().held("ProviderError", "stays pending")
    assert [r["status"] for r in ws.calls()] == ["pending"]


def test_an_exhausted_quota_is_a_refusal_that_says_so(ws, provider):
    """429 with insufficient_quota: the provider will not run it later either; recorded rejected, the message says why."""
    openai_workspace(ws, provider, sources={"alpha": ALPHA})
    provider.behave(sequence=["429-quota"])
    ws.start().held("ProviderError", "rejected", "quota is exhausted (insufficient_quota)", "add credit or use another key")
    [row] = ws.calls()
    assert row["status"] == "rejected" and len(provider.requests()) == 1


def test_waits_past_the_jobs_bound_stop_the_run_with_nothing_spent_and_resume_goes_on(ws, provider):
    """maxRateLimitWaitSeconds 2 and a provider asking for 5 s: nothing more is sent now, the HOLD line says why, no row
    stays pending (the job is ready, not uncertain), and a later resume sends the same attempt and finishes the job."""
    openai_workspace(ws, provider, sources={"alpha": ALPHA}, maxAttemptsPerItem=1, maxRateLimitWaitSeconds=2)
    provider.behave(sequence=["429-retry:5"])
    began = time.monotonic()
    ws.start().held("ProviderError", "rate-limited", "maxRateLimitWaitSeconds of 2 s", "No attempt or call was spent")
    assert time.monotonic() - began < 5  # it did not wait what it may not
    assert ws.calls() == [] and ws.run("status").ok()["phase"] == "ready"
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated"]
    [row] = ws.calls()
    assert row["attempt"] == 1 and len(provider.requests()) == 2


@pytest.mark.parametrize("value", [-1, 3601, True, "60"])
def test_a_bad_wait_bound_is_one_hold_line(ws, provider, value):
    openai_workspace(ws, provider, sources={"alpha": ALPHA}, maxRateLimitWaitSeconds=value)
    ws.start().held("ManifestError", "maxRateLimitWaitSeconds must be an integer from 0 to 3600")
    assert provider.requests() == []


def test_only_a_dispatch_may_stand_before_a_rate_limited_event_when_verify_reads_the_events():
    """verify's rule (as the store's m024 trigger's): a call's row goes only beside its `not-sent` or `rate-limited`
    event right after its dispatch; a call with an answer or a refusal recorded before it is never forgotten."""
    ok = [("dispatch", {}), ("rate-limited", {}), ("dispatch", {}), ("completed", {})]
    assert durable_job.after_unsent("k", ok) == [("dispatch", {}), ("completed", {})]
    with pytest.raises(durable_job.SealError, match="record it as rate-limited after dispatch → completed"):
        durable_job.after_unsent("k", [("dispatch", {}), ("completed", {}), ("rate-limited", {})])


def test_the_wait_a_provider_asks_for_is_read_from_each_header():
    assert durable_job.duration_seconds("6m0s") == 360 and durable_job.duration_seconds("20ms") == 0.02
    assert durable_job.duration_seconds("1h2m3.5s") == 3723.5 and durable_job.duration_seconds("soon") is None
    assert durable_job.asked_wait({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert durable_job.asked_wait({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0  # a past date: at once
    assert durable_job.asked_wait({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1m"}) == 60
    assert durable_job.asked_wait({}) is None
