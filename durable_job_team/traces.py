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

from durable_job import VERSION

PROVIDERS: list = []


def tracer():
    """The process's tracer, exporting in batches (shutdown() sends what is left)."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "durable-job", "service.version": VERSION})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    PROVIDERS.append(provider)
    return provider.get_tracer("durable_job", VERSION)


def failed(span, exc: BaseException) -> None:
    """A span ended by an error: its status says so with the error's type, never its message (it may quote a source)."""
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))


def shutdown() -> None:
    for provider in PROVIDERS:
        provider.shutdown()
