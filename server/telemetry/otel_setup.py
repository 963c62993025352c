"""The OpenTelemetry SDK, set up from the standard environment variables: imported only when
traces are on (:mod:`.tracing`), so a server that exports nothing never loads it.

The SDK reads most of the environment itself: the endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``…_TRACES_ENDPOINT``), headers, timeout, compression and certificates (the exporter), the
sampler (``OTEL_TRACES_SAMPLER``, ``…_ARG``: the tracer provider), the batching
(``OTEL_BSP_*``: the span processor) and the resource (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``). What is chosen here: which exporter
(``OTEL_TRACES_EXPORTER``: ``otlp``, the default, or ``console``) and, for OTLP, which
protocol (``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``:
``http/protobuf``, the default, or ``grpc`` when its exporter package is installed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

log = logging.getLogger("hermes.telemetry")

DEFAULT_SERVICE_NAME = "hermes-server"


def tracer_provider(environ: Mapping[str, str]) -> TracerProvider | None:
    """A provider exporting spans as the environment says, or None (after saying why) when
    no exporter it names can be had."""
    exporters = [e for e in (_exporter(name, environ) for name in _exporter_names(environ)) if e]
    if not exporters:
        return None
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporter_names(environ: Mapping[str, str]) -> list[str]:
    names = environ.get("OTEL_TRACES_EXPORTER", "").lower().split(",")
    return [name.strip() for name in names if name.strip() and name.strip() != "none"] or ["otlp"]


def _exporter(name: str, environ: Mapping[str, str]) -> SpanExporter | None:
    if name == "console":
        return ConsoleSpanExporter()
    if name != "otlp":
        log.error("OTEL_TRACES_EXPORTER=%s is not supported (otlp, console): ignored", name)
        return None
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter as GrpcSpanExporter,
            )
        except ImportError:
            log.error(
                "OTLP over grpc needs the opentelemetry-exporter-otlp-proto-grpc package; "
                "http/protobuf needs nothing more: traces are not exported"
            )
            return None
        exporter: SpanExporter = GrpcSpanExporter()
        return exporter
    log.error("OTLP protocol %r is not supported (http/protobuf, grpc): traces are off", protocol)
    return None
