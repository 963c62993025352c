"""Traces: one more view of the event stream, a span per run, per model call and per tool call.

A :class:`RunSpans` is a run observer like the metrics: it turns each run's events into spans
following the OpenTelemetry GenAI conventions, and nothing in the loop knows of it.

- ``invoke_agent {profile}`` per run: the root of its trace, or a child of the client's
  ``traceparent`` (extracted by the serving layer, handed over in ``RunInfo.trace_parent``);
  a sub-agent's run is an ``invoke_agent`` child of its ``delegate_task`` tool span.
- ``chat {model}`` per model call, from ``ModelCallStarted`` to ``StepFinished`` (usage,
  response model, finish reason). A fallback ends the failed provider's span with an error and
  opens one for the next provider; a retry is an event on the call's span.
- ``execute_tool {tool}`` per tool call, from ``ToolStarted`` to ``ToolFinished``.

Times: observers get every event synchronously, as it happens (``RunManager`` delivers them
inside the loop; a sub-agent's arrive through one queue hop), so the moment an event is seen
is the moment it happened, and a span's start and end are read from the clock then. A run's
span starts when the run was created (``RunInfo.created_at``), its workspace snapshot included.

Honest endings: a failed run, a failed model call and a tool call that did not succeed end
with an error status and ``error.type``; an interrupted or otherwise incomplete run is not an
error, and says how it ended in ``hermes.exit_reason`` (and ``hermes.interrupt_source``).

Message content (``gen_ai.input.messages``, ``gen_ai.output.messages``, tool arguments and
results) is recorded only when ``capture_content`` is on. A chat span's input is the
conversation as the run started (``TraceStart.history``: the events carry only what the run
adds) followed by what the run added before the call; the system prompt is not in it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import assert_never

import orjson
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    ClientToolCallsPending,
    CompressionPerformed,
    ExitReason,
    FallbackActivated,
    ImagePartial,
    MessageAdded,
    ModelCallStarted,
    PlanMade,
    ReasoningDelta,
    RetryScheduled,
    RunFinished,
    RunStarted,
    SourcesFound,
    Steered,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from hermes_core.messages import Message
from hermes_core.usage import Usage
from server.runs.manager import RunInfo
from server.telemetry import genai
from server.telemetry.json_logs import mask
from server.telemetry.trace_start import TraceStart

_SKIPPED = frozenset({TextDelta, ReasoningDelta, ToolCallGenerating, ToolProgress, SourcesFound})
"""Events no span needs: the per-token ones cost one set lookup each."""

_NOT_ERRORS = frozenset({ToolOutcome.SUCCESS, ToolOutcome.AWAITING_APPROVAL})
"""Tool outcomes that are no failure (a call waiting for approval did not fail)."""
CONTENT_FILTER = "content_filter"
"""How a run whose answer the upstream's filter stopped ended, as the GenAI conventions say
it (a finish reason of theirs) and as its error's type."""

RECENT_RUNS = 1024
"""Ended runs whose trace ids log lines may still ask for (a run's last lines follow its end)."""
EMPTY: Mapping[str, AttributeValue] = {}


@dataclass(slots=True)
class _Call:
    """A model call in progress: its span, and the last failure a retry reported."""

    span: Span
    failure: str | None = None


@dataclass(slots=True)
class _Held:
    """A finished chat span waiting for its assistant message (content capture only)."""

    span: Span
    end: int
    finish_reason: str


@dataclass(slots=True)
class _Agent:
    """One run being traced: the top-level run, or a sub-agent's inside it."""

    span: Span
    name: str
    """``gen_ai.agent.name``: the profile (a sub-agent is its parent's profile at work)."""
    attributes: dict[str, AttributeValue]
    """What every span of the run carries (the conversation id)."""
    call: _Call | None = None
    held: _Held | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    children: dict[tuple[str, int], _Agent] = field(default_factory=dict)
    messages: list[Message] | None = None
    """What the run added to its conversation so far, when content is captured."""
    failure: str | None = None
    """The last upstream error kind seen in the run (a retry's or a fallback's reason)."""
    model: str = ""
    """The model of the last call that answered."""
    turn_start: int = 0
    """Where this turn's own messages begin in ``messages`` (after the history's last answer)."""


class RunSpans:
    """Every run's spans. ``observe`` is a ``RunManager`` observer."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        capture_content: bool = False,
        provider_name: Callable[[str], str] = lambda name: name,
    ) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        self.provider_name = provider_name
        """Configured provider name → ``gen_ai.provider.name`` (``openai``, ``anthropic``)."""
        self._runs: dict[str, _Agent] = {}
        self._ended: dict[str, tuple[str, str]] = {}

    # --- what log lines ask -----------------------------------------------------------------

    def span_ids(self, run_id: str) -> tuple[str, str] | None:
        """The (trace id, span id) of a run's span, as hex, while it runs and a while after."""
        agent = self._runs.get(run_id)
        if agent is not None:
            return _ids(agent.span)
        return self._ended.get(run_id)

    # --- the observer -----------------------------------------------------------------------

    def observe(self, info: RunInfo, event: AgentEvent) -> None:
        if type(event) in _SKIPPED:
            return
        now = time.time_ns()
        agent = self._runs.get(info.id)
        if agent is None:
            if not isinstance(event, RunStarted | RunFinished):
                return  # a run that began before tracing did (a reload): not traced
            begun = info.trace_parent if isinstance(info.trace_parent, TraceStart) else None
            parent = begun.parent if begun is not None else None
            start = min(int(info.created_at * 1e9), now)
            extra: dict[str, AttributeValue] = {"hermes.endpoint": info.endpoint}
            if info.completion_id:
                extra[genai.RESPONSE_ID] = info.completion_id
            agent = self._start_run(
                info.model,
                event,
                info.session_id,
                parent if isinstance(parent, Context) else None,
                start,
                extra,
            )
            if agent.messages is not None and begun is not None and begun.history:
                agent.messages.extend(begun.history)
                agent.turn_start = _turn_start(begun.history)
            if begun is not None:
                begun.history = None  # the run's record keeps no transcript for us
            self._runs[info.id] = agent
        self._handle(info, agent, event, now)
        if isinstance(event, RunFinished):
            del self._runs[info.id]
            self._ended[info.id] = _ids(agent.span)
            if len(self._ended) > RECENT_RUNS:
                del self._ended[next(iter(self._ended))]

    def _start_run(
        self,
        name: str,
        first: RunStarted | RunFinished,
        conversation: str | None,
        parent: Context | None,
        start: int,
        extra: Mapping[str, AttributeValue] = EMPTY,
    ) -> _Agent:
        """A run's span, with all it is known by at its start (given at once: every attribute
        set later costs the SDK a lock and a validation of its own)."""
        if isinstance(first, RunStarted) and first.session_id and not conversation:
            conversation = first.session_id
        shared: dict[str, AttributeValue] = (
            {genai.CONVERSATION: conversation} if conversation else {}
        )
        attributes: dict[str, AttributeValue] = {
            genai.OPERATION: genai.INVOKE_AGENT,
            genai.AGENT_NAME: name,
            "hermes.run.id": first.run_id,
            **shared,
            **extra,
        }
        if isinstance(first, RunStarted):
            attributes[genai.REQUEST_MODEL] = first.model
            attributes[genai.PROVIDER] = self.provider_name(first.provider)
            attributes["hermes.provider"] = first.provider
            attributes["hermes.budget"] = first.budget
        span = self.tracer.start_span(
            f"{genai.INVOKE_AGENT} {name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            start_time=start,
            attributes=attributes,
        )
        return _Agent(span, name, shared, messages=[] if self.capture_content else None)

    def _handle(self, info: RunInfo, agent: _Agent, event: AgentEvent, now: int) -> None:
        match event:
            case RunStarted():
                pass  # what it says is on the run's span from its start
            case ModelCallStarted() | RetryScheduled() | FallbackActivated() | StepFinished():
                self._model_call(info, agent, event, now)
            case MessageAdded():
                self._message(agent, event.message, now)
            case ToolStarted():
                self._release(agent)
                agent.tools[event.call_id] = self._open_tool(agent, event, now)
            case ToolFinished():
                span = agent.tools.pop(event.call_id, None)
                if span is not None:
                    _end_tool(span, event, self.capture_content, now)
            case (
                ApprovalRequested()
                | ApprovalResolved()
                | ClientToolCallsPending()
                | BudgetWarning()
                | CompressionPerformed()
                | PlanMade()
            ):
                _note(agent, event, now)
            case SubagentEvent():
                self._subagent(info, agent, event, now)
            case RunFinished():
                self._finish_run(agent, event, now)
            case (
                TextDelta()
                | ReasoningDelta()
                | ToolCallGenerating()
                | ToolProgress()
                | SourcesFound()
                | ImagePartial()
                | Steered()
            ):
                pass
            case _:
                assert_never(event)

    def _model_call(
        self,
        info: RunInfo,
        agent: _Agent,
        event: ModelCallStarted | RetryScheduled | FallbackActivated | StepFinished,
        now: int,
    ) -> None:
        match event:
            case ModelCallStarted():
                self._release(agent)
                agent.call = self._open_call(
                    agent, event.provider, event.model, now, event.iteration, event.grace
                )
            case RetryScheduled():
                agent.failure = event.reason
                if agent.call is not None:
                    agent.call.failure = event.reason
                    agent.call.span.add_event(
                        "hermes.retry",
                        {
                            "hermes.provider": event.provider,
                            "hermes.attempt": event.attempt,
                            "hermes.delay_s": event.delay_s,
                            genai.ERROR_TYPE: event.reason,
                        },
                        timestamp=now,
                    )
            case FallbackActivated():
                agent.failure = event.reason
                if agent.call is not None:
                    _fail(agent.call.span, event.reason, f"fell back to {event.to_provider}")
                    agent.call.span.end(end_time=now)
                model = info.providers.get(event.to_provider, "")
                agent.call = self._open_call(agent, event.to_provider, model, now)
            case StepFinished():
                self._finish_call(agent, event, now)
            case _:
                assert_never(event)

    # --- runs ---------------------------------------------------------------------------------

    def _subagent(self, info: RunInfo, parent: _Agent, event: SubagentEvent, now: int) -> None:
        key = (event.call_id, event.child_index)
        child = parent.children.get(key)
        inner = event.event
        if child is None:
            if not isinstance(inner, RunStarted | RunFinished):
                return
            # A child of the delegate_task call's span: the tool that spawned it.
            under = parent.tools.get(event.call_id, parent.span)
            conversation = parent.attributes.get(genai.CONVERSATION)
            child = self._start_run(
                parent.name,
                inner,
                str(conversation) if conversation else None,
                trace.set_span_in_context(under),
                now,
                {"hermes.subagent.index": event.child_index},
            )
            parent.children[key] = child
        self._handle(info, child, inner, now)
        if isinstance(inner, RunFinished):
            del parent.children[key]

    def _finish_run(self, agent: _Agent, event: RunFinished, now: int) -> None:
        self._release(agent)
        interrupted = event.exit_reason is ExitReason.INTERRUPTED
        if agent.call is not None:  # the run ended inside a model call
            span = agent.call.span
            if interrupted:
                span.set_attribute("hermes.interrupted", True)
            else:
                _fail(span, agent.call.failure or genai.OTHER_ERROR, event.error)
            span.end(end_time=now)
            agent.call = None
        for span in agent.tools.values():  # tools the ending cut short
            span.set_attribute("hermes.tool.outcome", ToolOutcome.CANCELLED.value)
            _fail(span, ToolOutcome.CANCELLED.value, f"the run ended ({event.exit_reason})")
            span.end(end_time=now)
        agent.tools.clear()
        for child in agent.children.values():
            child.span.end(end_time=now)
        agent.children.clear()
        span = agent.span
        attributes: dict[str, AttributeValue] = {
            "hermes.exit_reason": event.exit_reason.value,
            "hermes.iterations": event.iterations,
            "hermes.model_calls": event.model_calls,
            genai.FINISH_REASONS: [event.exit_reason.value],
            **_usage(event.usage),
        }
        if agent.model:
            attributes[genai.RESPONSE_MODEL] = agent.model
        if event.interrupt_source is not None:
            attributes["hermes.interrupt_source"] = event.interrupt_source.value
        if event.session_id and event.session_id != agent.attributes.get(genai.CONVERSATION):
            attributes["hermes.session.id"] = event.session_id  # moved by a compression
        if agent.messages is not None:
            if agent.messages:
                turn = _turn_input(agent.messages[agent.turn_start :])
                attributes[genai.INPUT_MESSAGES] = genai.message_json(turn)
            attributes[genai.OUTPUT_MESSAGES] = genai.output_json(
                None, _finish_of(event), event.refusal or event.final_text
            )
        span.set_attributes(attributes)
        if event.exit_reason is ExitReason.FAILED:
            # The filter's stop, not a retry's reason seen earlier in the run.
            failure = CONTENT_FILTER if event.content_filtered else agent.failure
            _fail(span, failure or genai.OTHER_ERROR, event.error)
        span.end(end_time=now)

    # --- model calls --------------------------------------------------------------------------

    def _open_call(
        self,
        agent: _Agent,
        provider: str,
        model: str,
        now: int,
        iteration: int = 0,
        grace: bool = False,
    ) -> _Call:
        attributes: dict[str, AttributeValue] = {
            genai.OPERATION: genai.CHAT,
            genai.PROVIDER: self.provider_name(provider),
            genai.REQUEST_MODEL: model,
            "hermes.provider": provider,
            **agent.attributes,
        }
        if iteration:
            attributes["hermes.iteration"] = iteration
        if grace:
            attributes["hermes.grace"] = True
        if agent.messages:
            attributes[genai.INPUT_MESSAGES] = genai.message_json(agent.messages)
        span = self.tracer.start_span(
            f"{genai.CHAT} {model}",
            context=trace.set_span_in_context(agent.span),
            kind=SpanKind.CLIENT,
            start_time=now,
            attributes=attributes,
        )
        return _Call(span)

    def _finish_call(self, agent: _Agent, event: StepFinished, now: int) -> None:
        if agent.call is None:
            return
        span = agent.call.span
        agent.call = None
        agent.model = event.model
        attributes: dict[str, AttributeValue] = {
            genai.RESPONSE_MODEL: event.model,
            genai.FINISH_REASONS: [event.finish_reason],
            **_usage(event.usage),
        }
        if event.finish_reason == "interrupted":
            attributes["hermes.interrupted"] = True
            attributes["hermes.usage.estimated"] = True  # nobody said; the loop estimated it
        span.set_attributes(attributes)
        if agent.messages is None:
            span.end(end_time=now)
        else:  # its output is the assistant message the loop adds next
            agent.held = _Held(span, now, event.finish_reason)

    def _message(self, agent: _Agent, message: Message, now: int) -> None:
        if agent.messages is None:
            return
        held = agent.held
        if held is not None and message["role"] == "assistant":
            held.span.set_attribute(
                genai.OUTPUT_MESSAGES, genai.output_json(message, held.finish_reason)
            )
            held.span.end(end_time=held.end)
            agent.held = None
        agent.messages.append(message)

    def _release(self, agent: _Agent) -> None:
        """End a chat span still waiting for its message: none is coming."""
        if agent.held is not None:
            agent.held.span.end(end_time=agent.held.end)
            agent.held = None

    # --- tools --------------------------------------------------------------------------------

    def _open_tool(self, agent: _Agent, event: ToolStarted, now: int) -> Span:
        attributes: dict[str, AttributeValue] = {
            genai.OPERATION: genai.EXECUTE_TOOL,
            genai.TOOL_NAME: event.name,
            genai.TOOL_CALL_ID: event.call_id,
            genai.TOOL_TYPE: "function",
            **agent.attributes,
        }
        if self.capture_content:
            attributes[genai.TOOL_ARGUMENTS] = orjson.dumps(event.arguments).decode()
        return self.tracer.start_span(
            f"{genai.EXECUTE_TOOL} {event.name}",
            context=trace.set_span_in_context(agent.span),
            kind=SpanKind.INTERNAL,
            start_time=now,
            attributes=attributes,
        )


def _note(
    agent: _Agent,
    event: ApprovalRequested
    | ApprovalResolved
    | ClientToolCallsPending
    | BudgetWarning
    | CompressionPerformed
    | PlanMade,
    now: int,
) -> None:
    """What happened in a run that is no span of its own: an event on the run's (or the
    tool call's) span."""
    target, name = agent.span, ""
    attributes: dict[str, AttributeValue] = {}
    match event:
        case ApprovalRequested():
            target = agent.tools.get(event.call_id, agent.span)
            name, attributes = (
                "hermes.approval.requested",
                {"hermes.approval.id": event.approval_id},
            )
        case ApprovalResolved():
            target = agent.tools.get(event.call_id, agent.span)
            name = "hermes.approval.resolved"
            attributes = {
                "hermes.approval.id": event.approval_id,
                "hermes.decision": event.decision,
            }
        case ClientToolCallsPending():
            name = "hermes.client_tool_calls"
            attributes = {genai.TOOL_NAME: [call["function"]["name"] for call in event.tool_calls]}
        case BudgetWarning():
            name = "hermes.budget_warning"
            attributes = {"hermes.tier": event.tier, "hermes.used": event.used}
        case CompressionPerformed():
            name = "hermes.compression"
            attributes = {
                "hermes.tokens_before": event.tokens_before,
                "hermes.tokens_after": event.tokens_after,
                "hermes.summarised": event.summarised,
            }
            if event.summariser_call is not None:
                attributes.update(_usage(event.summariser_call.usage))
        case PlanMade():
            name = "hermes.plan"
            attributes = {
                "hermes.plan.steps": len(event.steps),
                "hermes.replanned": event.replanned,
            }
        case _:
            assert_never(event)
    target.add_event(name, attributes, timestamp=now)


def _end_tool(span: Span, event: ToolFinished, capture_content: bool, now: int) -> None:
    span.set_attribute("hermes.tool.outcome", event.outcome.value)
    if capture_content:
        span.set_attribute(genai.TOOL_RESULT, event.result_preview)
    if event.outcome not in _NOT_ERRORS:
        _fail(span, event.outcome.value, event.error)
    span.end(end_time=now)


def _fail(span: Span, error_type: str, description: str | None) -> None:
    span.set_attribute(genai.ERROR_TYPE, error_type)
    # An upstream's error may quote the key it refused: masked as the log masks it.
    span.set_status(Status(StatusCode.ERROR, mask(description) if description else error_type))


def _usage(usage: Usage) -> Mapping[str, AttributeValue]:
    attributes = {
        genai.INPUT_TOKENS: usage.input_tokens,
        genai.OUTPUT_TOKENS: usage.output_tokens,
    }
    if usage.cache_read_tokens:
        attributes[genai.CACHE_READ_TOKENS] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        attributes[genai.CACHE_WRITE_TOKENS] = usage.cache_write_tokens
    if usage.reasoning_tokens:
        attributes[genai.REASONING_TOKENS] = usage.reasoning_tokens
    return attributes


def _turn_input(messages: list[Message]) -> list[Message]:
    """What the turn was asked: the messages the run added before its first reply."""
    turn: list[Message] = []
    for message in messages:
        if message["role"] == "assistant":
            break
        turn.append(message)
    return turn


def _turn_start(history: list[Message]) -> int:
    """The index after the last assistant message: where the turn's new input begins."""
    for index in range(len(history) - 1, -1, -1):
        if history[index]["role"] == "assistant":
            return index + 1
    return 0


def _finish_of(end: RunFinished) -> str:
    """The run's answer's finish reason, in the GenAI conventions' words."""
    if end.content_filtered:
        return CONTENT_FILTER
    exit_reason = end.exit_reason
    return {
        ExitReason.COMPLETED: "stop",
        ExitReason.TRUNCATED: "length",
        ExitReason.AWAITING_CLIENT_TOOLS: "tool_calls",
    }.get(exit_reason, "error")


def _ids(span: Span) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"
