"""OpenTelemetry traces (issue 35): the SDK's tracer, made only when an OTEL_EXPORTER_OTLP_* variable names where to
send spans (durable_job.tracer() imports this module then, and never otherwise). Not sealed into any job.

Spans (each with durable_job.job_id, so one job's spans are found together): `durable_job COMMAND` a command,
`durable_job run` a run of the graph, `durable_job model call` a model call (durable_job.operation_key, the value
sent as X-Client-Request-Id; durable_job.attempt; durable_job.model; durable_job.input_tokens and
durable_job.output_tokens; durable_job.outcome: completed, rejected, uncertain or not sent), `durable_job decision`
a decision recorded. Nothing of a source or an answer is in any attribute; a failed span names its error's type only.
The exporter is OTLP over HTTP (protobuf), configured by the standard OTEL_EXPORTER_OTLP_* variables.
"""

from __future__ import annotations

import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode


class Traces:
    """The process's tracer, exporting in batches; `version` is the program's label (the core passes it: this module
    imports nothing of the core)."""

    def __init__(self, version: str):
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "durable-job", "service.version": version})
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer("durable_job", version)

    def span(self, name: str):
        """A span made current for a block; an error is recorded by failed(), never by the SDK (its message may quote)."""
        return self.tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False)

    def failed(self, span, exc: BaseException) -> None:
        """A span ended by an error: its status says so with the error's type, never its message (it may quote a source)."""
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))

    def shutdown(self) -> None:
        """Send what is left."""
        self.provider.shutdown()
