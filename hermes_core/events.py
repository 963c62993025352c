"""The event contract: everything a run says, as a closed union of typed events.

The agent loop is an async generator of these events; every consumer (HTTP views, metrics,
the transcript writer, the callback adapter) is a view of that stream and matches on ``kind``
exhaustively. Each event carries its run's id and a per-run sequence number that increases by
one per event, so a log of them can be replayed from any point.

Events of a sub-agent are not mixed into the parent's sequence: they arrive wrapped in a
:class:`SubagentEvent`, which has its own place in the parent's sequence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from hermes_core.messages import Message, ToolCall
from hermes_core.usage import Usage


class ExitReason(StrEnum):
    """How a run ended. Only ``completed`` is a clean success."""

    COMPLETED = "completed"
    """The model gave its final answer."""
    INTERRUPTED = "interrupted"
    """Someone called ``interrupt()`` (a stop endpoint, a client disconnect)."""
    BUDGET_EXHAUSTED = "budget_exhausted"
    """The iteration budget ran out; the answer, if any, came from the grace call."""
    TRUNCATED = "truncated"
    """The model hit its output token limit (tool arguments or text cut off)."""
    FAILED = "failed"
    """An upstream failure, or the model could not produce a usable reply."""
    AWAITING_CLIENT_TOOLS = "awaiting_client_tools"
    """The model called tools the client declared; the client must run them and continue."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallRecord:
    """One model call of a run: who served it and what it cost."""

    provider: str
    model: str
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class _Event:
    run_id: str
    """The run this event belongs to."""
    seq: int
    """Position in the run's event sequence: 0, 1, 2, ... without gaps."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(_Event):
    kind: Literal["run_started"] = "run_started"
    task_id: str
    """The caller's task id (generated when not given); stable across a session's runs."""
    model: str
    """The model the first call goes to."""
    provider: str
    """The provider the first call goes to."""
    streamed: bool = True
    """The model's replies are streamed as they are generated. False (nobody watches, e.g. a
    non-streaming client): each reply's text may arrive in one delta once it is complete."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusChanged(_Event):
    kind: Literal["status"] = "status"
    status: Literal["thinking", "calling_model", "running_tools", "retrying", "finishing"]
    message: str = ""
    """A short human-readable line, e.g. "Running 3 tools"."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReasoningDelta(_Event):
    kind: Literal["reasoning_delta"] = "reasoning_delta"
    text: str
    """A piece of the model's reasoning, as streamed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta(_Event):
    kind: Literal["text_delta"] = "text_delta"
    text: str
    """A piece of the assistant's answer, as streamed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallGenerating(_Event):
    kind: Literal["tool_call_generating"] = "tool_call_generating"
    index: int
    """Position of the call in the model's reply."""
    call_id: str | None
    """Known on the first delta of a call."""
    name: str | None
    """Known on the first delta of a call."""
    arguments_delta: str
    """The piece of argument text generated since the last event."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStarted(_Event):
    kind: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    arguments: dict[str, Any]
    """The validated (and type-coerced) arguments."""
    summary: str
    """One human-readable line, e.g. ``read_file README.md``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFinished(_Event):
    kind: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    ok: bool
    """False when the tool raised, timed out, was denied, cancelled or did not exist."""
    duration_s: float
    result_preview: str
    """The start of the result (at most a few hundred characters)."""
    error: str | None = None
    """Why the call failed, when it did."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested(_Event):
    kind: Literal["approval_requested"] = "approval_requested"
    call_id: str
    name: str
    reason: str
    """Why the action needs approval."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalResolved(_Event):
    kind: Literal["approval_resolved"] = "approval_resolved"
    call_id: str
    approved: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetWarning(_Event):
    kind: Literal["budget_warning"] = "budget_warning"
    tier: Literal["caution", "warning"]
    used: int
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryScheduled(_Event):
    kind: Literal["retry"] = "retry"
    provider: str
    attempt: int
    """The attempt that failed (1 for the first call)."""
    delay_s: float
    """How long the run waits before calling again (interruptible)."""
    reason: str
    """The failure's classification (``rate_limit``, ``server_error``, ...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FallbackActivated(_Event):
    kind: Literal["fallback"] = "fallback"
    from_provider: str
    to_provider: str
    reason: str
    """The failure classification that caused the switch (``rate_limit``, ``auth``, ...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompressionPerformed(_Event):
    kind: Literal["compression"] = "compression"
    tokens_before: int
    """Estimated prompt tokens of the transcript before compression."""
    tokens_after: int
    messages_before: int
    messages_after: int
    session_id: str
    """The child session that continues the conversation from here."""
    parent_session_id: str
    """The session that was compressed (the lineage)."""
    messages: list[Message]
    """The compressed transcript the child session starts from."""
    summarised: bool
    """False when only old tool outputs were pruned (no summary was written)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageAdded(_Event):
    kind: Literal["message_added"] = "message_added"
    index: int
    """Position of the message in the run's transcript."""
    message: Message
    """Appended to the transcript; persist it now (an assistant tool-call message arrives
    before its tools run)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFinished(_Event):
    kind: Literal["step_finished"] = "step_finished"
    iteration: int
    """1-based count of model calls that consumed the budget so far."""
    usage: Usage
    """This model call's usage."""
    provider: str
    model: str
    finish_reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientToolCallsPending(_Event):
    kind: Literal["client_tool_calls"] = "client_tool_calls"
    tool_calls: list[ToolCall]
    """Calls of tools the client declared; the run ends awaiting their results."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(_Event):
    kind: Literal["run_finished"] = "run_finished"
    exit_reason: ExitReason
    final_text: str
    """The final answer; on an interrupt, whatever text was streamed before it."""
    partial: bool = False
    """True when ``final_text`` is an unfinished answer (interrupted mid-stream)."""
    iterations: int
    usage: Usage
    """Summed over every model call of the run."""
    model_calls: int
    error: str | None = None
    """What went wrong, naming the upstream failure, when the run did not complete."""
    calls: list[CallRecord] = field(default_factory=list)
    """Every model call, in order: the provider and model that served it and its usage."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SubagentEvent(_Event):
    kind: Literal["subagent"] = "subagent"
    call_id: str
    """The ``delegate_task`` call that spawned the child."""
    child_index: int
    """Which of the call's tasks (0-based)."""
    event: AgentEvent
    """The child's own event, with the child's run id and sequence number."""


AgentEvent = (
    RunStarted
    | StatusChanged
    | ReasoningDelta
    | TextDelta
    | ToolCallGenerating
    | ToolStarted
    | ToolFinished
    | ApprovalRequested
    | ApprovalResolved
    | BudgetWarning
    | RetryScheduled
    | FallbackActivated
    | CompressionPerformed
    | MessageAdded
    | StepFinished
    | ClientToolCallsPending
    | RunFinished
    | SubagentEvent
)
