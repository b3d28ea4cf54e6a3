"""A job that needs a person says so (issue 35): OpenTelemetry traces, sent only when the environment names an OTLP
endpoint. A loopback OTLP/HTTP receiver (a tiny http.server decoding the protobuf with opentelemetry-proto) gets the
spans of real commands run as subprocesses against the loopback provider.
"""

import http.server
import shutil
import subprocess
import sys
import threading

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

import durable_job as dj
from conftest import ALPHA, BETA, PROGRAM, clean_env, free_port, openai_workspace, run_alone


class OtlpReceiver:
    """POST /v1/traces: each ExportTraceServiceRequest's spans, as {name, attributes, status, trace, service, scope,
    events} dicts (service: the resource's service.* attributes; scope: the tracer's name and version)."""

    def __init__(self):
        self.spans: list = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource.resource.attributes if a.key.startswith("service.")}
                    for scope in resource.scope_spans:
                        for s in scope.spans:
                            attributes = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in s.attributes}
                            receiver.spans.append(
                                {
                                    "name": s.name,
                                    "attributes": attributes,
                                    "status": (s.status.code, s.status.message),
                                    "trace": s.trace_id.hex(),
                                    "service": service,
                                    "scope": (scope.scope.name, scope.scope.version),
                                    "events": [e.name for e in s.events],
                                }
                            )
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(trace_service_pb2.ExportTraceServiceResponse().SerializeToString())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def named(self, name: str) -> list:
        return [s for s in self.spans if s["name"] == name]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def test_one_jobs_spans_reach_an_otlp_receiver_with_each_calls_tokens_and_no_source_text(ws, provider):
    receiver = OtlpReceiver()
    try:
        openai_workspace(ws, provider)
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        started = ws.run("start", "--manifest", ws.manifest, env=traced, timeout=120).ok()
        digest = ws.run("inspect").ok()["resultsSha256"]
        ws.run(
            "decide", "--decision", "accept", "--reviewer", "Rita", "--reason", "fine", "--results-sha256", digest, env=traced, timeout=120
        ).ok()
        keys = [r["client_request_id"] for r in provider.requests()]
        assert len(keys) == 2 and started["interrupt"]

        calls = receiver.named("durable_job model call")
        assert sorted(c["attributes"]["durable_job.operation_key"] for c in calls) == sorted(keys)  # X-Client-Request-Id
        for c in calls:
            a = c["attributes"]
            assert a["durable_job.job_id"] == "journey" and a["durable_job.attempt"] == 1 and a["durable_job.model"] == "gpt-test"
            assert a["durable_job.outcome"] == "completed" and a["durable_job.input_tokens"] > 0 and a["durable_job.output_tokens"] > 0
        [start_span] = receiver.named("durable_job start")
        [decide_span] = receiver.named("durable_job decide")
        assert start_span["attributes"]["durable_job.job_id"] == decide_span["attributes"]["durable_job.job_id"] == "journey"
        runs = receiver.named("durable_job run")
        assert len(runs) == 2 and all(r["attributes"]["durable_job.job_id"] == "journey" for r in runs)
        [decision] = receiver.named("durable_job decision")
        assert (
            decision["attributes"]["durable_job.decision"] == "accept" and decision["attributes"]["durable_job.principal"] == ws.principal()
        )
        assert {c["trace"] for c in calls} | {runs[0]["trace"]} == {start_span["trace"]}  # one command's spans: one trace
        answers = [r["output_text"] for r in provider.requests()]
        shown = " ".join(str(v) for s in receiver.spans for v in s["attributes"].values())
        for text in [ALPHA.strip()[:30], BETA.strip()[:30], *(a[:30] for a in answers)]:
            assert text not in shown

    finally:
        receiver.stop()


def test_a_call_never_sent_and_no_endpoint_at_all(ws, tmp_path):
    """A provider that is not there: the model call's span says `not sent`, and the command's span ends failed with the
    error's type alone. Without any OTEL_EXPORTER_OTLP_* variable, no OpenTelemetry module is imported."""
    receiver = OtlpReceiver()
    try:
        ws.write_manifest(mode="openai", model="gpt-test", maxAttemptsPerItem=1, maxModelCalls=2)
        ws.env.update({"OPENAI_API_KEY": "sk-test-" + "k3y" * 6, "OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"})
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
        ws.run("start", "--manifest", ws.manifest, env=traced, timeout=120).held("ProviderError")
        [call] = receiver.named("durable_job model call")
        assert call["attributes"]["durable_job.outcome"] == "not sent" and "durable_job.input_tokens" not in call["attributes"]
        [started] = receiver.named("durable_job start")
        assert (
            started["status"] == (2, "ProviderError") and started["events"] == []
        )  # STATUS_CODE_ERROR, the type alone, no exception event
    finally:
        receiver.stop()
    probe = "import sys, durable_job; durable_job.main(['status', '--state-dir', sys.argv[1]]); print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    out = subprocess.run(
        [sys.executable, "-c", probe, ws.state],
        capture_output=True,
        text=True,
        env={**clean_env(), "PYTHONPATH": str(PROGRAM.rsplit("/", 1)[0])},
        timeout=60,
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr


def test_durable_job_py_alone_sends_a_solo_jobs_spans_and_without_the_sdk_runs_untraced(ws, provider, tmp_path):
    """durable_job.py copied alone (no durable_job_team, none of the team's libraries) with requirements-otel.txt: the
    program sets the SDK's provider itself, so a solo job's spans reach the receiver, named for its service and its
    release. Where the OpenTelemetry API is installed but not the SDK, the engine's spans are the API's no-ops: the
    same job runs, and nothing is sent."""
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(PROGRAM, alone / "durable_job.py")
    program = str(alone / "durable_job.py")
    openai_workspace(ws, provider)
    receiver = OtlpReceiver()
    try:
        traced = {**ws.env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "review-desk"}
        started = run_alone(program, ["start", "--manifest", ws.manifest, "--state-dir", ws.state], ws.root, env=traced).ok()
        assert started["interrupt"] and started["jobId"] == "journey"
        [command] = receiver.named("durable_job start")
        assert command["attributes"]["durable_job.job_id"] == "journey" and command["status"] == (0, "")
        assert len(receiver.named("durable_job run")) == 1 and len(receiver.named("durable_job model call")) == 2
        assert {s["service"]["service.name"] for s in receiver.spans} == {"review-desk"}
        assert {s["service"]["service.version"] for s in receiver.spans} == {dj.__version__}  # the release
        assert {s["scope"] for s in receiver.spans} == {("durable_job", dj.VERSION)}  # the engine's tracer, by the API
        seen = len(receiver.spans)

        again = ["start", "--manifest", ws.manifest, "--state-dir", str(tmp_path / "untraced")]
        done = run_alone(program, again, ws.root, env=traced, missing=("opentelemetry.sdk",))
        assert done.ok()["interrupt"] and len(receiver.spans) == seen  # ran, untraced: no span, no error
    finally:
        receiver.stop()


def test_a_program_embedding_durable_job_keeps_its_own_provider_and_each_command_is_flushed(ws, tmp_path):
    """The documented OpenTelemetry split: the engine's spans use the API, the program sets the SDK. A Python program
    that calls durable_job.main twice with the variable set gets both commands' spans (each flushed as it ends, the
    provider left open for the next); one that set its own provider first keeps it: durable_job's spans go there."""
    assert ws.run("start", "--manifest", ws.manifest).ok()["interrupt"]
    receiver = OtlpReceiver()
    env = {**clean_env(), "PYTHONPATH": str(PROGRAM.rsplit("/", 1)[0]), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    twice = "import sys, durable_job\nfor _ in range(2): durable_job.main(['status', '--state-dir', sys.argv[1]])\n"
    own = (
        "import sys, durable_job\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "kept, provider = InMemorySpanExporter(), TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(kept))\n"
        "trace.set_tracer_provider(provider)\n"
        "durable_job.main(['status', '--state-dir', sys.argv[1]])\n"
        "print([(s.name, s.attributes['durable_job.job_id']) for s in kept.get_finished_spans()])\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", twice, ws.state], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        assert [s["attributes"]["durable_job.job_id"] for s in receiver.named("durable_job status")] == ["journey", "journey"]
        done = subprocess.run([sys.executable, "-c", own, ws.state], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == "[('durable_job status', 'journey')]", done.stderr
        assert len(receiver.spans) == 2  # nothing more sent to the endpoint: the program's provider had them
    finally:
        receiver.stop()
