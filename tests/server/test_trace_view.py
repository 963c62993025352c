"""The span view alone: literal events in, finished spans out (an in-memory exporter)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from hermes_core.events import (
    AgentEvent,
    ExitReason,
    FallbackActivated,
    InterruptSource,
    MessageAdded,
    ModelCallStarted,
    RetryScheduled,
    RunFinished,
    RunStarted,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolFinished,
    ToolOutcome,
    ToolStarted,
)
from hermes_core.usage import Usage
from server.runs.manager import RunInfo
from server.telemetry.spans import RunSpans
from server.telemetry.trace_start import TraceStart

RUN = "run_parent"
CHILD = "run_child"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exported = InMemorySpanExporter()
    yield exported
    exported.clear()


def view(exporter: InMemorySpanExporter, *, capture: bool = False) -> RunSpans:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    names = {"sim": "openai", "claude": "anthropic"}
    return RunSpans(
        provider.get_tracer("test"), capture_content=capture, provider_name=lambda n: names[n]
    )


def info(trace_parent: object = None) -> RunInfo:
    return RunInfo(
        id=RUN,
        owner="alice",
        endpoint="chat.completions",
        model="agent",
        completion_id="chatcmpl-1",
        session_id="sess_1",
        providers={"sim": "up-model", "claude": "claude-model"},
        trace_parent=trace_parent,
    )


class Run:
    """Events of one run, numbered as the loop would."""

    def __init__(self, run_id: str) -> None:
        self.run_id, self.seq = run_id, 0

    def __call__(self, cls: type[AgentEvent], **fields: Any) -> AgentEvent:
        event = cls(self.run_id, self.seq, **fields)
        self.seq += 1
        return event


def started(run: Run) -> AgentEvent:
    return run(
        RunStarted, task_id="t", session_id="sess_1", model="up-model", provider="sim", budget=5
    )


def step(run: Run, finish: str = "stop", usage: Usage | None = None) -> AgentEvent:
    return run(
        StepFinished,
        iteration=1,
        usage=usage or Usage(input_tokens=10, output_tokens=3, cache_read_tokens=4),
        provider="sim",
        model="up-model-2026",
        finish_reason=finish,
    )


def finished(run: Run, reason: ExitReason = ExitReason.COMPLETED, **fields: Any) -> AgentEvent:
    return run(
        RunFinished,
        exit_reason=reason,
        final_text="done",
        iterations=1,
        usage=Usage(input_tokens=10, output_tokens=3),
        model_calls=1,
        session_id="sess_1",
        **fields,
    )


def attrs(span: ReadableSpan) -> Mapping[str, Any]:
    assert span.attributes is not None
    return span.attributes


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_a_run_with_a_tool_and_a_sub_agent_is_one_trace_of_nested_spans(
    exporter: InMemorySpanExporter,
) -> None:
    spans = view(exporter)
    parent, child = Run(RUN), Run(CHILD)
    carrier = {"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"}
    run_info = info(TraceStart(TraceContextTextMapPropagator().extract(carrier)))

    def sub(event: AgentEvent) -> AgentEvent:
        return parent(SubagentEvent, call_id="call_d", child_index=0, event=event)

    events = [
        started(parent),
        parent(ModelCallStarted, iteration=1, provider="sim", model="up-model"),
        parent(TextDelta, text="thinking"),
        step(parent, "tool_calls"),
        parent(ToolStarted, call_id="call_d", name="delegate_task", arguments={}, summary="d"),
        sub(started(child)),
        sub(child(ModelCallStarted, iteration=2, provider="sim", model="up-model")),
        sub(step(child)),
        sub(finished(child)),
        parent(
            ToolFinished,
            call_id="call_d",
            name="delegate_task",
            outcome=ToolOutcome.SUCCESS,
            duration_s=0.1,
            result_preview="[]",
        ),
        finished(parent),
    ]
    for event in events:
        spans.observe(run_info, event)

    found = by_name(exporter)
    assert set(found) == {"invoke_agent agent", "chat up-model", "execute_tool delegate_task"}
    agents = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent agent"]
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat up-model"]
    assert len(agents) == 2
    assert len(chats) == 2
    root = next(s for s in agents if attrs(s)["hermes.run.id"] == RUN)
    sub_agent = next(s for s in agents if attrs(s)["hermes.run.id"] == CHILD)
    tool = found["execute_tool delegate_task"]
    assert {s.context.trace_id for s in exporter.get_finished_spans()} == {int(TRACE_ID, 16)}
    assert root.parent is not None
    assert root.parent.span_id == int(PARENT_SPAN, 16)
    assert tool.parent is not None
    assert tool.parent.span_id == root.context.span_id
    assert sub_agent.parent is not None
    assert sub_agent.parent.span_id == tool.context.span_id
    assert {c.parent.span_id for c in chats if c.parent} == {
        root.context.span_id,
        sub_agent.context.span_id,
    }
    assert attrs(root)["gen_ai.operation.name"] == "invoke_agent"
    assert attrs(root)["gen_ai.conversation.id"] == "sess_1"
    assert attrs(root)["gen_ai.response.id"] == "chatcmpl-1"
    assert attrs(root)["hermes.exit_reason"] == "completed"
    assert root.status.status_code is StatusCode.UNSET
    chat = chats[0]
    assert attrs(chat)["gen_ai.provider.name"] == "openai"
    assert attrs(chat)["gen_ai.request.model"] == "up-model"
    assert attrs(chat)["gen_ai.response.model"] == "up-model-2026"
    assert attrs(chat)["gen_ai.usage.input_tokens"] == 10
    assert attrs(chat)["gen_ai.usage.cache_read.input_tokens"] == 4
    assert attrs(tool)["gen_ai.tool.call.id"] == "call_d"
    assert "gen_ai.tool.call.arguments" not in attrs(tool)
    assert all(s.start_time <= s.end_time for s in exporter.get_finished_spans())  # type: ignore[operator]


def test_a_fallback_ends_the_failed_providers_call_with_its_error(
    exporter: InMemorySpanExporter,
) -> None:
    spans, run = view(exporter), Run(RUN)
    for event in [
        started(run),
        run(ModelCallStarted, iteration=1, provider="sim", model="up-model"),
        run(RetryScheduled, provider="sim", attempt=1, delay_s=0.5, reason="server_error"),
        run(FallbackActivated, from_provider="sim", to_provider="claude", reason="server_error"),
        step(run),
        finished(run),
    ]:
        spans.observe(info(), event)
    failed, answered = (
        by_name(exporter)["chat up-model"],
        by_name(exporter)["chat claude-model"],
    )
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "server_error"
    assert [e.name for e in failed.events] == ["hermes.retry"]
    assert attrs(answered)["gen_ai.provider.name"] == "anthropic"
    assert answered.status.status_code is StatusCode.UNSET


def test_a_failed_run_ends_its_open_call_and_itself_with_an_error(
    exporter: InMemorySpanExporter,
) -> None:
    spans, run = view(exporter), Run(RUN)
    for event in [
        started(run),
        run(ModelCallStarted, iteration=1, provider="sim", model="up-model"),
        run(RetryScheduled, provider="sim", attempt=1, delay_s=0.5, reason="rate_limit"),
        finished(run, ExitReason.FAILED, error="rate limited"),
    ]:
        spans.observe(info(), event)
    found = by_name(exporter)
    for name in ("chat up-model", "invoke_agent agent"):
        assert found[name].status.status_code is StatusCode.ERROR
        assert attrs(found[name])["error.type"] == "rate_limit"
    assert found["invoke_agent agent"].status.description == "rate limited"


def test_an_interrupted_run_is_no_error_and_says_who_stopped_it(
    exporter: InMemorySpanExporter,
) -> None:
    spans, run = view(exporter), Run(RUN)
    for event in [
        started(run),
        run(
            ToolStarted, call_id="c1", name="terminal", arguments={"command": "sleep"}, summary="s"
        ),
        finished(run, ExitReason.INTERRUPTED, interrupt_source=InterruptSource.STOP_API),
    ]:
        spans.observe(info(), event)
    found = by_name(exporter)
    root = found["invoke_agent agent"]
    assert root.status.status_code is StatusCode.UNSET
    assert attrs(root)["hermes.exit_reason"] == "interrupted"
    assert attrs(root)["hermes.interrupt_source"] == "stop_api"
    tool = found["execute_tool terminal"]
    assert attrs(tool)["error.type"] == "cancelled"


def test_message_content_is_recorded_only_when_asked(exporter: InMemorySpanExporter) -> None:
    spans, run = view(exporter, capture=True), Run(RUN)
    for event in [
        started(run),
        run(MessageAdded, index=0, message={"role": "user", "content": "what is 2+2?"}),
        run(ModelCallStarted, iteration=1, provider="sim", model="up-model"),
        step(run),
        run(MessageAdded, index=1, message={"role": "assistant", "content": "4"}),
        finished(run),
    ]:
        spans.observe(info(), event)
    chat = by_name(exporter)["chat up-model"]
    assert json.loads(str(attrs(chat)["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "what is 2+2?"}]}
    ]
    assert json.loads(str(attrs(chat)["gen_ai.output.messages"])) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}
    ]
    root = by_name(exporter)["invoke_agent agent"]
    assert "what is 2+2?" in str(attrs(root)["gen_ai.input.messages"])


def test_log_lines_find_a_runs_trace_ids_during_and_after_it(
    exporter: InMemorySpanExporter,
) -> None:
    spans, run = view(exporter), Run(RUN)
    spans.observe(info(), started(run))
    during = spans.span_ids(RUN)
    spans.observe(info(), finished(run))
    root = by_name(exporter)["invoke_agent agent"]
    assert (
        during
        == spans.span_ids(RUN)
        == (
            f"{root.context.trace_id:032x}",
            f"{root.context.span_id:016x}",
        )
    )
