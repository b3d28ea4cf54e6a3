"""The real provider path: the openai SDK over HTTP, proven against the loopback server.

The journeys run the CLI as a subprocess with the real openai SDK pointed at
tests/provider_server.py; the server's own request log is the witness of what
was sent. A few in-process tests drive call_model and get_or_call over the same
real HTTP. Only the last test patches anything (the SDK's constructor), to pin
the exact arguments of the one request shape.

Each CLI run that executes the graph costs about 3 s of start-up, so the
journeys that only read a finished job share one module-scoped run.
"""

import json
import os
import time
from unittest import mock

import pytest

import durable_job
from conftest import ALPHA, BETA, FAKE_KEY, PROGRAM, Ledger, Provider, Workspace, free_port, openai_workspace, sha256

JOB = {"jobId": "in-process", "model": "gpt-test", "mode": "openai"}
ALPHA_ITEM = {"id": "alpha", "sha256": sha256(ALPHA)}
BOUNDS = {"maxAttemptsPerItem": 2, "maxModelCalls": 6}
REFUSALS = ["400", "401", "403", "404", "422"]  # a 429: tests/test_rate_limits.py


# ---------------------------------------------------------------------------
# helpers


def assert_no_key(ws: Workspace, *outputs: str) -> None:
    """Neither the key nor a fragment of it is in any byte of the state directory or in any output."""
    fragment = FAKE_KEY[len("sk-test-") :][:9]
    for dirpath, _, files in os.walk(ws.state):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                data = fh.read()
            assert FAKE_KEY.encode() not in data and fragment.encode() not in data, f"key bytes in {name}"
    for text in outputs:
        assert FAKE_KEY not in text and fragment not in text, text


@pytest.fixture
def openai_env(monkeypatch, provider):
    """This process's environment pointed at the loopback provider (for in-process calls)."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "DURABLE_JOB_")):
            monkeypatch.delenv(name)
    for name, value in provider.env(DURABLE_JOB_OPENAI_TIMEOUT="2").items():
        monkeypatch.setenv(name, value)
    return provider


class Reviewed:
    """One successful openai-mode job, shared by the read-only checks below."""

    def __init__(self, root):
        self.provider = Provider(root)
        self.ws = openai_workspace(Workspace(root), self.provider)
        self.start = self.ws.start()
        self.status = self.ws.run("status")
        self.inspect = self.ws.run("inspect")


def shared_job(kind, tmp_path_factory):
    """One provider job run once per module and read by several tests; its server stops afterwards."""
    job = kind(tmp_path_factory.mktemp(kind.__name__.lower()))
    yield job
    job.provider.stop()


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory):
    yield from shared_job(Reviewed, tmp_path_factory)


# ---------------------------------------------------------------------------
# the happy path over HTTP


def test_openai_job_over_http_reaches_review_with_one_request_per_item(reviewed):
    """A two-item openai job reaches review; the server saw exactly one plain request per item."""
    out = reviewed.start.ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    assert out["interrupt"] and out["interrupt"][0]["statuses"] == {"alpha": "validated", "beta": "validated"}

    requests = reviewed.provider.requests()
    assert len(requests) == 2
    results = reviewed.inspect.ok()["results"]
    items = [{"id": "alpha", "sha256": sha256(ALPHA)}, {"id": "beta", "sha256": sha256(BETA)}]
    for n, (req, item, source) in enumerate(zip(requests, items, (ALPHA, BETA))):
        assert req["path"] == "/v1/responses"
        assert req["model"] == "gpt-test"
        assert req["store"] is False
        assert req["max_output_tokens"] == 500
        assert req["tools"] is None and "tools" not in req["body"]
        assert req["instructions"] == durable_job.SYSTEM
        assert source in req["input"]
        assert req["input"] == durable_job.model_input(item, source, results[:n])


def test_journal_rows_carry_the_servers_response_id_request_id_and_usage(reviewed):
    """Each completed row holds exactly what the server answered: response id, x-request-id, usage, text."""
    rows = reviewed.ws.calls()
    requests = reviewed.provider.requests()
    assert [r["status"] for r in rows] == ["completed", "completed"]
    for row, req in zip(rows, requests):
        assert row["response_id"] == req["response_id"] and row["response_id"].startswith("resp_")
        assert row["request_id"] == f"req_{req['seq']}"
        assert row["output_text"] == req["output_text"]
        usage = json.loads(row["usage_json"])
        assert usage["input_tokens"] == len(req["input"]) // 4
        assert usage["output_tokens"] == len(req["output_text"]) // 4
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    calls = reviewed.status.ok()["calls"]
    assert [c[3:] for c in calls] == [[r["response_id"], r["request_id"]] for r in rows]


def test_operation_key_travels_as_x_client_request_id(reviewed):
    """A person can match the journal to provider-side logs: the header is the operation key."""
    keys = [c[0] for c in reviewed.status.ok()["calls"]]
    assert [r["headers"]["x-client-request-id"] for r in reviewed.provider.requests()] == keys
    assert all(k.endswith(":1") for k in keys)


def test_api_key_is_never_stored_or_printed_on_success(reviewed):
    """The key reached the server (Authorization) but no byte of the state or any output holds it."""
    assert all(r["headers"]["authorization"] == f"Bearer {FAKE_KEY}" for r in reviewed.provider.requests())
    assert_no_key(reviewed.ws, reviewed.start.stdout, reviewed.start.stderr, reviewed.status.stdout, reviewed.inspect.stdout)


# ---------------------------------------------------------------------------
# unknown outcomes stay pending and are never sent again


def test_server_error_leaves_the_call_pending_and_resume_says_uncertain(ws, provider):
    """A 500 is an unknown outcome: the row stays pending with its request id, and resume sends nothing."""
    openai_workspace(ws, provider)
    provider.behave("500")
    first = ws.start()
    [row] = ws.calls()
    first.held("ProviderError", "alpha", row["operation_key"], "pending")
    assert row["status"] == "pending" and row["request_id"] == "req_1"
    assert len(provider.requests()) == 1  # SDK retries are off: one 500, one request

    provider.behave("ok")
    ws.run("resume").held("UncertainCall", f"UNCERTAIN_CALL alpha {row['operation_key']}")
    status = ws.run("status").ok()
    assert status["calls"] == [[row["operation_key"], "alpha", "pending", None, "req_1"]]
    assert status["next"].startswith(f"UNCERTAIN_CALL alpha {row['operation_key']}")
    assert len(provider.requests()) == 1
    assert_no_key(ws, first.stderr)


def test_timed_out_call_is_reconciled_from_the_provider_log_and_never_resent(ws, provider):
    """A request that times out (DURABLE_JOB_OPENAI_TIMEOUT=1) stays pending; the person completes it
    from the answer the provider logged but never delivered, and the job finishes with no second
    request for that item. (A dropped connection takes the same path: see the in-process test below.)"""
    openai_workspace(ws, provider)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "1"
    provider.behave(sequence=["hang"])
    began = time.monotonic()
    first = ws.start()
    elapsed = time.monotonic() - began
    [row] = ws.calls()
    key = row["operation_key"]
    first.held("ProviderError", key)
    assert row["status"] == "pending" and row["request_id"] is None  # no answer, so no request id
    [logged] = provider.requests()
    assert logged["client_request_id"] == key and logged["behaviour"] == "hang"
    assert "Timeout" in first.stderr
    assert elapsed < 25, f"the 1 s timeout did not apply ({elapsed:.1f} s; the default is 30 s)"
    status = ws.run("status").ok()
    assert status["calls"] == [[key, "alpha", "pending", None, None]]
    assert status["next"].startswith(f"UNCERTAIN_CALL alpha {key}")
    # (resume's UNCERTAIN_CALL refusal is shown for a 500 above, and for drop and hang in process below)

    answer = provider.response_file(logged, os.path.join(ws.root, "recovered-response.json"))
    rec = ws.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--reviewer",
        "ops@example.test",
        "--reason",
        "provider log shows the answer",
        "--response-file",
        answer,
    ).ok()
    assert rec["status"] == "completed" and rec["itemId"] == "alpha"

    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"] and out["interrupt"]
    requests = provider.requests()
    assert len(requests) == 2 and requests[1]["client_request_id"] != key  # only beta was sent
    alpha = ws.calls()[0]
    assert (alpha["status"], alpha["output_text"], alpha["response_id"], alpha["request_id"]) == (
        "completed",
        logged["output_text"],
        logged["response_id"],
        "req_1",
    )
    with open(answer, "rb") as fh:
        assert json.loads(alpha["reconciliation_json"])["responseFileSha256"] == sha256(fh.read())


@pytest.mark.parametrize("behaviour", ["500", "drop", "hang"])
def test_get_or_call_keeps_any_other_failure_pending(openai_env, monkeypatch, tmp_path, behaviour):
    """In process, through the journal: a 500, a dropped connection and a timeout all stay pending
    (with the request id only when one came back); the next call refuses with UNCERTAIN_CALL."""
    provider = openai_env
    provider.behave(behaviour)
    monkeypatch.setenv("DURABLE_JOB_OPENAI_TIMEOUT", "1")
    db = durable_job.ledger(str(tmp_path / "effects.sqlite"))
    prompt = durable_job.model_input(ALPHA_ITEM, ALPHA, [])
    import openai

    expected = {"500": openai.InternalServerError, "drop": openai.APIConnectionError, "hang": (openai.APITimeoutError, TimeoutError)}
    with pytest.raises(expected[behaviour]):  # the SDK's own exception, as the provider path raised it
        durable_job.get_or_call(db, JOB, BOUNDS, ALPHA_ITEM, ALPHA, prompt)
    [row] = Ledger(db).calls()
    assert row["status"] == "pending"
    assert row["request_id"] == ("req_1" if behaviour == "500" else None)
    provider.behave("ok")
    with pytest.raises(durable_job.UncertainCall, match=f"UNCERTAIN_CALL alpha {row['operation_key']}"):
        durable_job.get_or_call(db, JOB, BOUNDS, ALPHA_ITEM, ALPHA, prompt)
    assert len(provider.requests()) == 1
    db.close()


# ---------------------------------------------------------------------------
# a connection that never opened is no call at all


def test_a_connection_that_never_opened_is_no_call_and_resume_after_the_fix_just_works(ws, tmp_path):
    """Nothing listens at OPENAI_BASE_URL (a typo in the port): the request provably never left, so the
    journal keeps no uncertain row and no attempt is spent; one HOLD line names the URL and the fix.
    Once the server runs there, `resume` just works, with the same operation key."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    ws.write_manifest(mode="openai", model="gpt-test", maxAttemptsPerItem=1, maxModelCalls=2)
    ws.env.update({"OPENAI_API_KEY": FAKE_KEY, "OPENAI_BASE_URL": url, "DURABLE_JOB_OPENAI_TIMEOUT": "5"})
    line = ws.start().held(
        "ProviderError",
        "item alpha was not sent",
        f"{url}/responses",
        "never opened",
        "no attempt was spent",
        "Check OPENAI_BASE_URL",
        "resume",
    )
    assert "pending" not in line and "reconcile" not in line and "may have been billed" not in line
    assert ws.calls() == []  # no uncertain row, no attempt spent
    [key] = {e["operation_key"] for e in ws.events()}
    [dispatch, not_sent] = ws.events(key)
    assert (dispatch["event"], not_sent["event"]) == ("dispatch", "not-sent")
    detail = not_sent["detail"]
    assert detail["url"] == f"{url}/responses" and detail["cause"] == "ConnectError" and detail["error"] == "APIConnectionError"
    status = ws.run("status").ok()
    assert status["calls"] == [] and "reconcile" not in status["next"]
    ws.run("resume").held("was not sent", f"{url}/responses")  # still nothing there: still no call
    assert ws.calls() == []

    provider = Provider(tmp_path, port=port)  # the fix: the server now runs at that URL
    try:
        out = ws.run("resume").ok()
        assert [r["status"] for r in out["results"]] == ["validated", "validated"] and out["interrupt"]
        rows = ws.calls()
        assert [(r["item_id"], r["attempt"], r["status"]) for r in rows] == [("alpha", 1, "completed"), ("beta", 1, "completed")]
        assert rows[0]["operation_key"] == key  # the same work, the same key: the provider never saw it before
        assert [r["client_request_id"] for r in provider.requests()] == [r["operation_key"] for r in rows]
        ws.run("decide", "--decision", "hold", "--reviewer", "r@example.test", "--reason", "checked").ok()
        verified = ws.run("verify").ok()
        assert verified["ok"] is True, verified
    finally:
        provider.stop()


def full_backlog_port(stack) -> int:
    """A loopback port whose listen queue is full (backlog 0, never accepted): a new connection's SYN is
    dropped, so connecting times out while nothing is ever written."""
    import socket

    server = stack.enter_context(socket.socket())
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    for _ in range(3):
        filler = stack.enter_context(socket.socket())
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
    time.sleep(0.2)
    return port


@pytest.mark.parametrize("where", ["refused", "no-such-name", "tls-to-plain-http", "connect-timeout"])
def test_get_or_call_forgets_a_request_that_never_left_and_raises_the_sdks_error(openai_env, monkeypatch, tmp_path, where):
    """In process: connection refused, a name that does not resolve, a TLS handshake that fails (https to
    a plain-HTTP server: its log shows no request) and a connect that times out are the SDK's
    APIConnectionError caused by the HTTP client's ConnectError or ConnectTimeout. The row is removed,
    a not-sent event kept, and the next call is attempt 1 again."""
    import contextlib

    import openai

    provider = openai_env
    monkeypatch.setenv("DURABLE_JOB_OPENAI_TIMEOUT", "1")
    port = int(provider.base_url.rsplit(":", 1)[1].split("/")[0])
    stack = contextlib.ExitStack()
    url = {
        "refused": lambda: f"http://127.0.0.1:{free_port()}/v1",
        "no-such-name": lambda: "http://durable-job-test.invalid/v1",
        "tls-to-plain-http": lambda: f"https://127.0.0.1:{port}/v1",
        "connect-timeout": lambda: f"http://127.0.0.1:{full_backlog_port(stack)}/v1",
    }[where]()
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    db = durable_job.ledger(str(tmp_path / "effects.sqlite"))
    prompt = durable_job.model_input(ALPHA_ITEM, ALPHA, [])
    with stack, pytest.raises(openai.APIConnectionError) as caught:
        durable_job.get_or_call(db, JOB, BOUNDS, ALPHA_ITEM, ALPHA, prompt)
    assert type(caught.value.__cause__).__name__ == ("ConnectTimeout" if where == "connect-timeout" else "ConnectError")
    assert Ledger(db).calls() == [] and provider.requests() == []
    assert [e["event"] for e in Ledger(db).events()] == ["dispatch", "not-sent"]

    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    output = durable_job.get_or_call(db, JOB, BOUNDS, ALPHA_ITEM, ALPHA, prompt)
    assert durable_job.check_proposal(output, ALPHA_ITEM, ALPHA)["status"] == "validated"
    assert [(r["attempt"], r["status"]) for r in Ledger(db).calls()] == [(1, "completed")]
    db.close()


# ---------------------------------------------------------------------------
# definite refusals are rejected attempts


class Refused:
    """An openai job whose first call is refused with a 400 that echoes the API key; then resumed."""

    def __init__(self, root):
        self.provider = Provider(root)
        ws = self.ws = openai_workspace(Workspace(root), self.provider)
        self.provider.behave(sequence=["echo-key-400"])
        self.start = ws.start()
        self.rows_after_start = ws.calls()
        self.status = ws.run("status")
        self.status_text = ws.run("status", "--text")
        self.inspect = ws.run("inspect")
        self.page = os.path.join(str(root), "review.html")
        self.inspect_html = ws.run("inspect", "--html", self.page)
        self.resume = ws.run("resume")


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    yield from shared_job(Refused, tmp_path_factory)


def test_definite_refusal_is_recorded_as_rejected_with_status_and_message(refused):
    """The provider answered 400, so nothing was produced: the row is `rejected`, not pending, with
    the HTTP status and message in reconciliation_json and in call_events."""
    line = refused.start.held("ProviderError", "HTTP 400", "rejected")
    [row] = refused.rows_after_start
    assert row["operation_key"] in line
    assert row["status"] == "rejected" and row["request_id"] == "req_1" and row["output_text"] is None
    rejected = json.loads(row["reconciliation_json"])["rejected"]
    assert rejected["httpStatus"] == 400 and "test server error 400: bad key" in rejected["message"]
    recorded = refused.ws.events(row["operation_key"])
    assert [e["event"] for e in recorded] == ["dispatch", "rejected"] and recorded[1]["detail"]["httpStatus"] == 400
    assert refused.provider.requests()[0]["client_request_id"] == row["operation_key"]


def test_resume_after_a_refusal_takes_the_next_attempt_without_reconcile(refused):
    """The refusal counts as an attempt; status says resume (no reconcile) and resume finishes the job."""
    status = refused.status.ok()
    assert status["calls"][0][2] == "rejected"
    assert "rejected" in status["next"] and "resume" in status["next"] and "reconcile" not in status["next"]

    out = refused.resume.ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"] and out["interrupt"]
    rows = refused.ws.calls()
    assert [(r["item_id"], r["attempt"], r["status"]) for r in rows] == [
        ("alpha", 1, "rejected"),
        ("alpha", 2, "completed"),
        ("beta", 1, "completed"),
    ]
    assert [r["client_request_id"] for r in refused.provider.requests()] == [r["operation_key"] for r in rows]


def test_an_item_refused_on_every_allowed_attempt_reaches_review_as_failed(ws, provider):
    """Two 429s for alpha (maxAttemptsPerItem 2): each stops the run; the next resume reviews alpha as failed."""
    openai_workspace(ws, provider)
    provider.behave(sequence=["429-quota", "429-quota"])
    ws.start().held("HTTP 429", "rejected", "if maxAttemptsPerItem allows one")
    ws.run("resume").held("HTTP 429", "rejected")
    status = ws.run("status").ok()
    assert "rejected" in status["next"] and "resume" in status["next"]
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["failed", "validated"] and out["interrupt"]
    assert "maxAttemptsPerItem" in ws.run("inspect").ok()["results"][0]["reason"]
    assert [(r["item_id"], r["attempt"], r["status"]) for r in ws.calls()] == [
        ("alpha", 1, "rejected"),
        ("alpha", 2, "rejected"),
        ("beta", 1, "completed"),
    ]
    assert len(provider.requests()) == 3
    # the earlier refusals no longer colour the next step once the job moved on
    following = ws.run("status").ok()["next"]  # alpha failed: revise it by hand (no attempt left to retry), or decide
    assert "rejected" not in following and following.startswith("item alpha failed (no model call left")
    assert " retry " not in following and "revise --state-dir" in following and f"or decide: python {PROGRAM} decide" in following


def test_api_key_echoed_by_the_server_is_never_stored_or_printed(refused):
    """The server put the key in its error message: the HOLD line, the journal, status, inspect,
    the review page and every state file hold `[redacted]` instead."""
    first = refused.provider.requests()[0]
    assert first["behaviour"] == "echo-key-400" and first["headers"]["authorization"] == f"Bearer {FAKE_KEY}"
    line = refused.start.held("[redacted]")
    assert "[redacted]" in json.loads(refused.rows_after_start[0]["reconciliation_json"])["rejected"]["message"]
    refused.inspect_html.ok()
    with open(refused.page) as fh:
        page = fh.read()
    outputs = [
        r.stdout + r.stderr
        for r in (refused.start, refused.status, refused.status_text, refused.inspect, refused.inspect_html, refused.resume)
    ]
    assert_no_key(refused.ws, line, page, *outputs)


@pytest.mark.parametrize("code", REFUSALS)
def test_every_definite_refusal_is_recorded_as_rejected(openai_env, tmp_path, code):
    """400/401/403/404/422 (in process, through the journal): `rejected` with HTTP status and
    message in the row and in call_events, one request (no SDK retry), and the next call takes attempt 2."""
    provider = openai_env
    provider.behave(sequence=[code])
    db = durable_job.ledger(str(tmp_path / "effects.sqlite"))
    prompt = durable_job.model_input(ALPHA_ITEM, ALPHA, [])
    import openai

    with pytest.raises(openai.APIStatusError) as caught:  # the SDK's own exception, the row rejected
        durable_job.get_or_call(db, JOB, BOUNDS, ALPHA_ITEM, ALPHA, prompt)
    assert caught.value.status_code == int(code)
    [row] = Ledger(db).calls()
    assert row["status"] == "rejected" and row["request_id"] == "req_1"
    rejected = json.loads(row["reconciliation_json"])["rejected"]
    assert rejected["httpStatus"] == int(code) and f"test server error {code}" in rejected["message"]
    [event] = [e for e in Ledger(db).events() if e["event"] != "dispatch"]
    assert event["event"] == "rejected" and json.loads(event["detail_json"])["httpStatus"] == int(code)
    assert len(provider.requests()) == 1

    output = durable_job.get_or_call(db, JOB, BOUNDS, ALPHA_ITEM, ALPHA, prompt)
    assert durable_job.check_proposal(output, ALPHA_ITEM, ALPHA)["status"] == "validated"
    assert [(r["attempt"], r["status"]) for r in Ledger(db).calls()] == [(1, "rejected"), (2, "completed")]
    db.close()


def test_rejected_attempt_counts_against_the_bounds(openai_env, tmp_path):
    """With one attempt per item, a refusal uses it: the next call is refused and nothing is sent."""
    provider = openai_env
    provider.behave(sequence=["403"])
    db = durable_job.ledger(str(tmp_path / "effects.sqlite"))
    prompt = durable_job.model_input(ALPHA_ITEM, ALPHA, [])
    bounds = {"maxAttemptsPerItem": 1, "maxModelCalls": 6}
    import openai

    with pytest.raises(openai.PermissionDeniedError):
        durable_job.get_or_call(db, JOB, bounds, ALPHA_ITEM, ALPHA, prompt)
    with pytest.raises(durable_job.BudgetError, match="maxAttemptsPerItem"):
        durable_job.get_or_call(db, JOB, bounds, ALPHA_ITEM, ALPHA, prompt)
    assert len(provider.requests()) == 1
    db.close()


# ---------------------------------------------------------------------------
# bad replies, secrets and refusals before anything is sent


@pytest.mark.parametrize(
    "reply,reason", [("not-json", "not valid JSON"), ("incomplete", "model output is empty")], ids=["prose", "incomplete-with-no-output"]
)
def test_a_reply_that_is_not_a_proposal_fails_the_item_and_accept_is_refused(ws, provider, reply, reason):
    """Prose, or an incomplete answer with no output at all, marks the item failed (no crash); accept is refused."""
    openai_workspace(ws, provider)
    provider.behave(sequence=[reply])
    out = ws.start().ok()
    assert {r["itemId"]: r["status"] for r in out["results"]} == {"alpha": "failed", "beta": "validated"}
    failed = ws.run("inspect").ok()["results"][0]
    assert reason in failed["reason"]
    row = ws.calls()[0]
    assert row["status"] == "completed" and row["response_id"]  # the call itself succeeded, and was billed
    assert row["output_text"] == provider.requests()[0]["output_text"]
    ws.run("decide", "--decision", "accept", "--reviewer", "r@example.test", "--reason", "looks fine").held("Cannot accept", "alpha")
    assert ws.run("status").ok()["phase"] == "awaiting-review"
    ws.run("decide", "--decision", "reject", "--reviewer", "r@example.test", "--reason", "alpha has no summary").ok()
    assert ws.run("verify").ok()["ok"] is True
    assert len(provider.requests()) == 2


def test_a_redirect_is_never_followed_so_a_call_reaches_one_url_once(ws, provider):
    """The SDK's default client follows redirects: the same operation key would reach the server twice,
    and the source text could go to a host the job never named. Here the 307 is the answer: unknown outcome."""
    openai_workspace(ws, provider)
    provider.behave(sequence=["redirect"])
    ws.start().held("ProviderError", "stays pending")
    log = provider.requests()
    assert [r["path"] for r in log] == ["/v1/responses"]
    assert [(r["item_id"], r["status"]) for r in ws.calls()] == [("alpha", "pending")]


def test_a_key_the_server_echoes_in_its_ids_is_never_stored_or_shown(ws, provider, tmp_path):
    openai_workspace(ws, provider)
    provider.behave(sequence=["echo-key-ids"])
    ws.start().ok()
    row = ws.calls()[0]
    assert row["response_id"] == "resp-[redacted]" and row["request_id"] == "req-[redacted]"
    page = str(tmp_path / "page.html")
    ws.run("inspect", "--html", page).ok()
    ws.env.pop("OPENAI_API_KEY")  # status and inspect without the key in the environment show only what was stored
    shown = ws.run("status").stdout + ws.run("inspect", "--text").stdout
    for name in os.listdir(ws.state):
        with open(os.path.join(ws.state, name), "rb") as fh:
            assert FAKE_KEY.encode() not in fh.read(), name
    with open(page, encoding="utf-8") as fh:
        assert FAKE_KEY not in fh.read() + shown


def test_model_output_that_echoes_the_key_is_stored_and_shown_redacted(tmp_path, provider):
    """A model may repeat whatever it was sent: its text is journaled, checked, checkpointed and shown
    with the key replaced, so no byte of the state directory or of any output holds it."""
    ws = openai_workspace(Workspace(tmp_path, inprocess=True), provider)
    provider.behave("echo-key-output")
    started = ws.start().ok()
    assert [r["status"] for r in started["results"]] == ["validated", "validated"]
    assert all(FAKE_KEY in r["output_text"] for r in provider.requests())  # the server did echo it
    assert [r["output_text"].count("[redacted]") for r in ws.calls()] == [1, 1]
    inspected = ws.run("inspect").ok()
    assert all(r["summary"].endswith("(sent with [redacted])") for r in inspected["results"])
    page = str(tmp_path / "page.html")
    ws.run("inspect", "--html", page).ok()
    with open(page, encoding="utf-8") as fh:
        shown = [fh.read(), json.dumps(started), ws.run("status").stdout, ws.run("inspect", "--text").stdout]
    decided = ws.run("decide", "--decision", "accept", "--reviewer", "r", "--reason", "quotes match")
    assert decided.ok()["final"]["decision"] == "accept"
    assert_no_key(ws, *shown, decided.stdout)


@pytest.mark.parametrize(
    "variable,value,phrase",
    [
        ("OPENAI_API_KEY", FAKE_KEY + " ", "a space, a line break"),
        ("OPENAI_API_KEY", FAKE_KEY + "\n", "a space, a line break"),
        ("OPENAI_BASE_URL", "127.0.0.1:9/v1", "not an http:// or https:// URL"),
    ],
)
def test_a_local_provider_setting_mistake_is_refused_before_any_pending_row(ws, provider, variable, value, phrase):
    """Such a request never leaves the process: it must not become an uncertain, possibly billed call."""
    openai_workspace(ws, provider)
    ws.env[variable] = value
    ws.start().held("JobError", phrase)
    assert provider.requests() == [] and not os.path.exists(os.path.join(ws.state, "effects.sqlite"))


@pytest.mark.parametrize("transfer", ["absent", False])
def test_openai_manifest_without_transfer_approval_sends_nothing(ws, provider, transfer):
    """Without providerTransferApproved: true, start holds (exit 2) and the server never hears of it."""
    manifest = ws.manifest_dict(mode="openai", model="gpt-test", providerTransferApproved=False)
    if transfer == "absent":
        del manifest["providerTransferApproved"]
    ws.write_manifest(manifest)
    ws.env.update(provider.env())
    ws.start().held("ManifestError", "providerTransferApproved")
    assert provider.requests() == []
    assert not os.path.exists(os.path.join(ws.state, "job.json"))


@pytest.mark.parametrize("key", [None, "   "])
def test_missing_api_key_holds_at_start_before_any_row_or_request(ws, provider, key):
    """No OPENAI_API_KEY: start holds, writes no journal row and sends nothing."""
    openai_workspace(ws, provider)
    if key is None:
        del ws.env["OPENAI_API_KEY"]
    else:
        ws.env["OPENAI_API_KEY"] = key
    ws.start().held("OPENAI_API_KEY")
    assert provider.requests() == []
    assert not os.path.exists(os.path.join(ws.state, "effects.sqlite"))


@pytest.mark.parametrize("value", ["0", "soon", "-5"])
def test_bad_timeout_setting_holds_before_anything_is_sent(ws, provider, value):
    """DURABLE_JOB_OPENAI_TIMEOUT must be seconds; a bad value holds at start and sends nothing."""
    openai_workspace(ws, provider)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = value
    ws.start().held("DURABLE_JOB_OPENAI_TIMEOUT")
    assert provider.requests() == []
    assert not os.path.exists(os.path.join(ws.state, "effects.sqlite"))


# ---------------------------------------------------------------------------
# the adapter itself


def test_call_model_in_process_returns_what_the_server_answered(openai_env):
    """call_model over real HTTP returns (output text, response id, request id, usage)."""
    provider = openai_env
    prompt = durable_job.model_input(ALPHA_ITEM, ALPHA, [])
    text, response_id, request_id, usage = durable_job.call_model(JOB, ALPHA_ITEM, ALPHA, prompt)
    [logged] = provider.requests()
    assert (text, response_id, request_id) == (logged["output_text"], logged["response_id"], "req_1")
    assert usage["input_tokens"] == len(prompt) // 4 and usage["output_tokens"] == len(text) // 4
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert durable_job.check_proposal(text, ALPHA_ITEM, ALPHA)["status"] == "validated"
    assert logged["client_request_id"] is None  # no operation key given, no header

    durable_job.call_model(JOB, ALPHA_ITEM, ALPHA, prompt, operation_key="abc:1")
    assert provider.requests()[1]["client_request_id"] == "abc:1"


def test_call_model_times_out_after_the_configured_seconds(openai_env, monkeypatch):
    """DURABLE_JOB_OPENAI_TIMEOUT shortens the 30 s default; the hung request is sent exactly once."""
    import openai

    provider = openai_env
    provider.behave("hang")
    monkeypatch.setenv("DURABLE_JOB_OPENAI_TIMEOUT", "1")
    began = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        durable_job.call_model(JOB, ALPHA_ITEM, ALPHA, "prompt")
    assert time.monotonic() - began < 10
    assert len(provider.requests()) == 1


def test_an_answer_that_trickles_in_is_cut_at_the_deadline_and_stays_pending(ws, provider):
    """The SDK's timeout bounds each wait; a body sent a byte a second would hold the run for minutes."""
    openai_workspace(ws, provider)
    ws.env["DURABLE_JOB_OPENAI_TIMEOUT"] = "2"
    provider.behave(sequence=["trickle"])
    began = time.monotonic()
    ws.start().held("ProviderError", "TimeoutError", "no complete answer within 7 s", "stays pending")
    assert time.monotonic() - began < 30  # minutes without the deadline: the body is about a kilobyte
    assert [(r["item_id"], r["status"]) for r in ws.calls()] == [("alpha", "pending")]
    assert len(provider.requests()) == 1


@pytest.mark.parametrize("setting, timeout", [(None, 30.0), ("2", 2.0)])
def test_client_has_retries_off_and_request_has_exactly_the_contract_arguments(monkeypatch, setting, timeout):
    """The one patched test: OpenAI(max_retries=0, timeout=30.0 or the setting), and
    responses.create(model, instructions=SYSTEM, input=prompt, max_output_tokens=500, store=False)."""
    import openai

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.delenv("DURABLE_JOB_OPENAI_TIMEOUT", raising=False)
    if setting is not None:
        monkeypatch.setenv("DURABLE_JOB_OPENAI_TIMEOUT", setting)
    prompt = durable_job.model_input(ALPHA_ITEM, ALPHA, [])
    with mock.patch.object(openai, "OpenAI") as client_class:
        create = client_class.return_value.responses.create
        create.return_value.output_text = '{"x": 1}'
        create.return_value.id = "resp_mock"
        create.return_value._request_id = "req_mock"
        create.return_value.usage.model_dump.return_value = {"total_tokens": 7}
        result = durable_job.call_model(JOB, ALPHA_ITEM, ALPHA, prompt)
    kwargs = client_class.call_args.kwargs
    client_class.assert_called_once_with(max_retries=0, timeout=timeout, http_client=kwargs["http_client"])
    assert type(kwargs["timeout"]) is float
    assert kwargs["http_client"].follow_redirects is False  # one operation key, one request, one host
    create.assert_called_once_with(model="gpt-test", instructions=durable_job.SYSTEM, input=prompt, max_output_tokens=500, store=False)
    assert result == ('{"x": 1}', "resp_mock", "req_mock", {"total_tokens": 7})
