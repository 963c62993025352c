"""Whether runs are traced, and the two hooks that make it so: :func:`install_tracing` (the
app, once) and :func:`incoming_trace` (the serving layer, per run).

Traces are on when the environment names where to send them: ``OTEL_EXPORTER_OTLP_ENDPOINT``
or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set, or an ``OTEL_TRACES_EXPORTER`` other than
``none``; ``OTEL_SDK_DISABLED=true`` keeps them off whatever else is set. Off, nothing of the
SDK is imported, no provider is installed, no exporter thread runs, no observer is added (a
run's events cost nothing more) and :func:`incoming_trace` is one test of a global.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from server.telemetry import genai, run_context
from server.telemetry.trace_start import TraceStart

if TYPE_CHECKING:
    from hermes_core.agent import AgentRequest
    from server.services import Services
    from server.telemetry.spans import RunSpans

log = logging.getLogger("hermes.telemetry")

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = frozenset({"true", "1", "yes", "span_only", "span_and_event"})
"""Values that put message content on spans (the last two: the newer conventions' modes)."""

_extract: Callable[[Mapping[str, str]], object] | None = None
"""The W3C trace-context extractor, once tracing is on."""
_capture = False
"""Message content goes on spans."""


def tracing_requested(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def capture_content(environ: Mapping[str, str]) -> bool:
    return environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _CAPTURE_ON


def install_tracing(
    services: Services, environ: Mapping[str, str] | None = None
) -> RunSpans | None:
    """Trace every run of ``services`` when the environment asks for it; None otherwise."""
    global _extract, _capture
    env = os.environ if environ is None else environ
    if not tracing_requested(env):
        return None
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    from server.telemetry.otel_setup import tracer_provider
    from server.telemetry.spans import RunSpans

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the process's first app: set it up
        made = tracer_provider(env)
        if made is None:
            return None
        trace.set_tracer_provider(made)
        provider = made
    spans = RunSpans(
        provider.get_tracer("hermes-server"),
        capture_content=capture_content(env),
        provider_name=_provider_names(services),
    )
    services.runs.observers.append(spans.observe)
    run_context.use_span_ids(spans.span_ids)
    _extract = TraceContextTextMapPropagator().extract
    _capture = spans.capture_content
    log.info("tracing runs%s", " with message content" if spans.capture_content else "")
    return spans


def incoming_trace(headers: Mapping[str, str] | None, request: AgentRequest) -> TraceStart | None:
    """What the trace of ``request``'s run starts from: the trace the request's
    ``traceparent`` (and ``tracestate``) continues, and its history when content is captured;
    None when tracing is off."""
    if _extract is None:
        return None
    parent = _extract(headers) if headers is not None else None
    return TraceStart(parent, list(request.history) if _capture else None)


def _provider_names(services: Services) -> Callable[[str], str]:
    """Configured provider name → ``gen_ai.provider.name``, by the API the provider speaks
    (read from the profiles in force, so a reload's new providers are named too)."""
    known: dict[str, str] = {}

    def name_of(provider: str) -> str:
        found = known.get(provider)
        if found is None:
            modes = {
                member.name: member.api_mode
                for profile in services.profiles
                for chain in profile.chains
                for member in getattr(chain, "providers", [chain])
            }
            mode = modes.get(provider)
            found = provider if mode is None else genai.PROVIDER_OF_API_MODE.get(mode, genai.OPENAI)
            known[provider] = found
        return found

    return name_of
