"""Chat Completions (issue 48): a job sealed with `"api": "chat"` sends each call to /v1/chat/completions with the real
openai SDK over HTTP to the loopback provider (tests/provider_server.py, which answers as the API documents it), and
every guarantee of the journal holds as it does for the Responses API: pending before, completed after, an unknown
outcome never sent again, a definite refusal recorded. The provider's own request log is the witness of what was sent.
"""

import json
import os
import subprocess

import httpx
import pytest

import durable_job
from conftest import ALPHA, BETA, BOTH, FAKE_KEY, REPO, clean_env, free_port, kill_group, openai_workspace, sha256, wait_for

# The LiteLLM proxy (requirements-litellm.txt), installed by `make test` into an environment of its own.
LITELLM = os.path.join(REPO, ".venv", "litellm", "bin", "litellm")


def chat_job(ws, provider, **api):
    """A two-item openai job on the loopback provider, sealed for Chat Completions (and `api`'s other keys)."""
    return openai_workspace(ws, provider, api="chat", **api)


@BOTH
def test_a_chat_job_reaches_review_with_one_chat_request_per_item_and_verifies(ws, provider):
    """Each item is one Chat Completions request: the job's instruction as the system message, the item's input as the
    user message, the answer bounded by max_completion_tokens, JSON asked for, nothing stored, retries off, the
    operation key as X-Client-Request-Id; the journal keeps the completion's id, the request id and its usage."""
    chat_job(ws, provider)
    out = ws.start().ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    requests = provider.requests()
    assert [r["path"] for r in requests] == ["/v1/chat/completions"] * 2
    results = ws.run("inspect").ok()["results"]
    items = [{"id": "alpha", "sha256": sha256(ALPHA)}, {"id": "beta", "sha256": sha256(BETA)}]
    for n, (req, item, source) in enumerate(zip(requests, items, (ALPHA, BETA))):
        body = req["body"]
        assert body["messages"] == [
            {"role": "system", "content": durable_job.SYSTEM},
            {"role": "user", "content": durable_job.model_input(item, source, results[:n])},
        ]
        assert body["model"] == "gpt-test" and body["store"] is False
        assert body["max_completion_tokens"] == durable_job.MAX_OUTPUT_TOKENS and "max_tokens" not in body
        assert body["response_format"] == {"type": "json_object"}
        assert "input" not in body and "instructions" not in body  # nothing of the Responses API's shape
    rows = ws.calls()
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert [r["headers"]["x-client-request-id"] for r in requests] == [r["operation_key"] for r in rows]
    for row, req in zip(rows, requests):
        assert row["response_id"].startswith("chatcmpl-") and row["request_id"] == f"req_{req['seq']}"
        assert row["output_text"] == req["output_text"]
        usage = json.loads(row["usage_json"])
        assert usage == {
            "input_tokens": len(req["input"]) // 4,
            "output_tokens": len(req["output_text"]) // 4,
            "total_tokens": len(req["input"]) // 4 + len(req["output_text"]) // 4,
        }
    assert ws.run("inspect").ok()["tokens"]["total"] == sum(json.loads(r["usage_json"])["total_tokens"] for r in rows)
    assert ws.run("verify").ok()["ok"] is True
    job = ws.run("inspect").ok()["job"]
    assert job["api"] == {"name": "chat", "maxTokensParameter": "max_completion_tokens", "jsonOutput": True}
    for path in [os.path.join(ws.state, name) for name in os.listdir(ws.state)] if ws.store is None else []:
        with open(path, "rb") as fh:
            assert FAKE_KEY.encode() not in fh.read()


def test_a_server_that_takes_max_tokens_and_no_json_mode_gets_exactly_that(ws, provider):
    """seal --api chat --max-tokens-parameter max_tokens --no-json-output: the request bounds its answer with max_tokens
    and asks for no response_format (llama.cpp's and older servers' shape); the job reaches review all the same."""
    source = ws.write_source("alpha.txt", ALPHA)
    sealed = ws.run(
        "seal",
        "--out",
        ws.manifest,
        "--force",
        "--job-id",
        "chat-plain",
        "--approved-by",
        "Owner",
        "--mode",
        "openai",
        "--model",
        "gpt-test",
        "--provider-transfer-approved",
        "--api",
        "chat",
        "--max-tokens-parameter",
        "max_tokens",
        "--no-json-output",
        source,
        state=False,
    ).ok()
    with open(sealed["manifest"]) as fh:
        manifest = json.load(fh)
    assert (manifest["api"], manifest["maxTokensParameter"], manifest["jsonOutput"]) == ("chat", "max_tokens", False)
    ws.env.update(provider.env(DURABLE_JOB_OPENAI_TIMEOUT="5"))
    assert [r["status"] for r in ws.start().ok()["results"]] == ["validated"]
    [req] = provider.requests()
    assert req["body"]["max_tokens"] == durable_job.MAX_OUTPUT_TOKENS
    assert "max_completion_tokens" not in req["body"] and "response_format" not in req["body"]


@BOTH
def test_a_chat_call_with_an_unknown_outcome_is_never_sent_again_and_is_reconciled_from_the_providers_log(ws, provider):
    """A dropped connection after the server answered: the row stays pending, resume sends nothing and says
    UNCERTAIN_CALL, the person completes it with the answer the provider logged, and only the other item is sent."""
    chat_job(ws, provider)
    provider.behave(sequence=["drop"])
    first = ws.start()
    [row] = ws.calls()
    key = row["operation_key"]
    first.held("ProviderError", key)
    assert row["status"] == "pending"
    ws.run("resume").held("UncertainCall", f"UNCERTAIN_CALL alpha {key}")
    assert len(provider.requests()) == 1
    [logged] = provider.requests()
    answer = os.path.join(ws.root, "answer.json")
    with open(answer, "w") as fh:
        json.dump({"outputText": logged["output_text"], "responseId": logged["response_id"]}, fh)
    ws.run(
        "reconcile",
        "--operation-key",
        key,
        "--action",
        "complete",
        "--reviewer",
        "ops",
        "--reason",
        "in the log",
        "--response-file",
        answer,
    ).ok()
    out = ws.run("resume").ok()
    assert [r["status"] for r in out["results"]] == ["validated", "validated"]
    requests = provider.requests()
    assert len(requests) == 2 and requests[1]["client_request_id"] != key
    assert ws.run("verify").ok()["ok"] is True


@pytest.mark.parametrize("code", ["400", "401", "422"])
def test_a_definite_chat_refusal_is_recorded_rejected_and_the_next_attempt_goes_out(ws, provider, code):
    """A 4xx from the chat endpoint is a refusal: recorded rejected with its status, and resume takes the next attempt."""
    chat_job(ws, provider)
    provider.behave(sequence=[code])
    ws.start().held("ProviderError", "refused", f"HTTP {code}")
    [row] = ws.calls()
    assert row["status"] == "rejected"
    assert [r["status"] for r in ws.run("resume").ok()["results"]] == ["validated", "validated"]
    assert [r["attempt"] for r in ws.calls()] == [1, 2, 1]


def test_an_answer_cut_at_the_token_limit_fails_its_item_for_review(ws, provider):
    """finish_reason "length": the text the server returned (cut) is journaled as it came, and fails validation."""
    chat_job(ws, provider)
    provider.behave(sequence=["incomplete"])
    out = ws.start().ok()
    assert [r["status"] for r in out["results"]] == ["failed", "validated"]
    assert "JSON" in out["results"][0]["reason"]


def test_the_same_input_sent_by_chat_is_another_operation_from_the_responses_api():
    """The input digest covers how a call is sent: a chat job's operation key differs from a Responses job's for the same
    instruction, prompt and model, while a Responses job's digest is what it always was."""
    job = {"jobId": "j", "model": "gpt-test", "mode": "openai"}
    chat = {**job, "api": durable_job.provider_api({"api": "chat"})}
    before = durable_job.sha256_hex(
        durable_job.canonical({"system": durable_job.SYSTEM, "prompt": "p", "model": "gpt-test", "version": durable_job.VERSION})
    )
    assert durable_job.input_sha256(job, "p") == before
    assert durable_job.input_sha256(chat, "p") != before


@pytest.mark.parametrize(
    "manifest, phrase",
    [
        ({"api": "chat-completions"}, 'api must be "responses" or "chat"'),
        ({"maxTokensParameter": "max_tokens"}, "maxTokensParameter applies to Chat Completions only"),
        ({"jsonOutput": False}, "jsonOutput applies to Chat Completions only"),
        ({"api": "chat", "maxTokensParameter": "n_predict"}, 'maxTokensParameter must be "max_completion_tokens"'),
        ({"api": "chat", "jsonOutput": "no"}, "jsonOutput must be true or false"),
    ],
)
def test_a_bad_api_key_in_the_manifest_is_one_hold_line_before_anything_is_sent(ws, provider, manifest, phrase):
    openai_workspace(ws, provider, **manifest)
    ws.start().held("ManifestError", phrase)
    assert provider.requests() == []


def test_seal_refuses_chat_options_without_chat_naming_the_flag(ws):
    source = ws.write_source("alpha.txt", ALPHA)
    common = ["seal", "--out", ws.manifest, "--force", "--job-id", "x", "--approved-by", "O", "--mode", "fake", "--model", "m"]
    ws.run(*common, "--no-json-output", source, state=False).held("--no-json-output (the manifest's jsonOutput) applies to Chat")
    ws.run(*common, "--api", "chat", "--max-tokens-parameter", "max_tokens", source, state=False).ok()


def test_a_chat_job_through_the_litellm_proxy_reaches_review_with_every_quote_checked(ws, provider, tmp_path):
    """A real third-party OpenAI-compatible server between the program and the provider: the LiteLLM proxy, configured
    with the loopback provider as its upstream model. The chat job reaches review, every quote checked; what reached the
    upstream is the job's two chat requests, each with store false (the owner did not opt in), and the job verifies."""
    assert os.path.exists(LITELLM), f"{LITELLM} is missing: `make test` installs the LiteLLM proxy (requirements-litellm.txt)"
    config = tmp_path / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: gpt-test\n    litellm_params:\n      model: openai/gpt-test\n"
        f"      api_base: {provider.base_url}\n      api_key: sk-upstream-not-a-secret\n"
    )
    port = free_port()
    # no network: the proxy's model price map is read from its own package, never fetched; it reports nothing anywhere
    env = {**clean_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "LITELLM_MASTER_KEY": FAKE_KEY}
    with open(tmp_path / "litellm.log", "wb") as log:
        proxy = subprocess.Popen(
            [LITELLM, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:

        def live() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).status_code == 200
            except httpx.HTTPError:
                return proxy.poll() is not None  # it died: the assertion below says so

        wait_for(live, timeout=120, interval=0.25)
        assert proxy.poll() is None, (tmp_path / "litellm.log").read_text()[-2000:]
        chat_job(ws, provider)
        ws.env["OPENAI_BASE_URL"] = f"http://127.0.0.1:{port}/v1"
        out = ws.start().ok()
        assert [r["status"] for r in out["results"]] == ["validated", "validated"]
        checked = ws.run("inspect").ok()["results"]
        assert all(r["citations"] and all(c["quote"] in (ALPHA + BETA) for c in r["citations"]) for r in checked)
        upstream = [r for r in provider.requests() if r["path"].endswith("/chat/completions")]
        assert len(upstream) == 2 and all(r["body"]["store"] is False for r in upstream)
        assert [r["status"] for r in ws.calls()] == ["completed", "completed"]
        assert ws.run("verify").ok()["ok"] is True
    finally:
        kill_group(proxy)
