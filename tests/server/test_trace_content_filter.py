"""A run whose answer the upstream's content filter stopped says so in its trace, in the
GenAI conventions' words: its answer's finish reason is ``content_filter`` (not ``error``),
and so is its error's type (not the reason of a retry seen earlier in the run)."""

from __future__ import annotations

import json

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hermes_core.events import ExitReason, ModelCallStarted, RetryScheduled
from tests.server.test_trace_view import (  # noqa: F401 (fixtures)
    RUN,
    Run,
    attrs,
    by_name,
    exporter,
    finished,
    info,
    started,
    step,
    view,
)


def test_a_filtered_answer_ends_its_runs_span_on_content_filter(
    exporter: InMemorySpanExporter,  # noqa: F811
) -> None:
    spans, run = view(exporter, capture=True), Run(RUN)
    for event in [
        started(run),
        run(ModelCallStarted, iteration=1, provider="sim", model="up-model"),
        run(RetryScheduled, provider="sim", attempt=1, delay_s=0.5, reason="rate_limit"),
        step(run, finish="content_filter"),
        finished(run, ExitReason.FAILED, error="filtered", content_filtered=True),
    ]:
        spans.observe(info(), event)

    root = attrs(by_name(exporter)["invoke_agent agent"])
    (answer,) = json.loads(str(root["gen_ai.output.messages"]))
    assert answer["finish_reason"] == "content_filter"
    assert root["error.type"] == "content_filter"
