"""The event contract: everything a run says, as a closed union of typed events.

The agent loop is a stream of these events; every consumer (HTTP views, metrics, the transcript
writer, the callback adapter) is a view of that stream and matches on the event exhaustively.
Events carry facts, never sentences to parse: how a run was interrupted, how a tool call ended,
whether a model call was the grace call, which session the run ended in. Human-readable text
(progress lines, status messages) is the views' job.

Each event carries its run's id and a per-run sequence number that increases by one per event,
so a log of them can be replayed from any point. Both are stamped in one place, the loop's
``Emitter``, which is why they are the two positional fields every event starts with: the
emitter's ``emit(EventClass, **fields)`` is type-checked against the class's own fields.

Events of a sub-agent are not mixed into the parent's sequence: they arrive wrapped in a
:class:`SubagentEvent`, which has its own place in the parent's sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import (
    Any,
    Concatenate,
    Literal,
    ParamSpec,
    Protocol,
    TypeVar,
)

from hermes_core.messages import Message, ToolCall
from hermes_core.records import record as event  # a 20-chunk stream builds 26 events
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
    AWAITING_APPROVAL = "awaiting_approval"
    """A tool call waits for a human's approval; the next turn (or the approvals endpoint)
    answers it, and the run's work goes on from there."""


class InterruptSource(StrEnum):
    """Who interrupted a run (``Agent.interrupt(source=...)``)."""

    STOP_API = "stop_api"
    """A stop request for the run (``POST /v1/runs/{id}/stop``)."""
    CANCEL_API = "cancel_api"
    """A cancel request for the response the run serves (``POST /v1/responses/{id}/cancel``)."""
    DELETE_API = "delete_api"
    """The response the run serves was deleted while it ran."""
    CLIENT_DISCONNECT = "client_disconnect"
    """The client following the run went away (Open WebUI's stop button)."""
    SHUTDOWN = "shutdown"
    """The server is shutting down."""
    SESSION_BUSY = "session_busy"
    """A newer turn of its session came with ``session_busy: interrupt``, and runs next."""
    PARENT = "parent"
    """The run is a sub-agent's, and its parent was interrupted."""
    OTHER = "other"
    """Anything else: a library caller's own ``interrupt()``."""


class ToolOutcome(StrEnum):
    """How one tool call ended."""

    SUCCESS = "success"
    ERROR = "error"
    """The tool raised; its error is the result."""
    NOT_FOUND = "not_found"
    """The model called a tool that does not exist."""
    INVALID_ARGUMENTS = "invalid_arguments"
    """The arguments did not parse or did not fit the tool's schema."""
    DENIED = "denied"
    """An approval was asked for and refused (or no approver was there to ask)."""
    BLOCKED = "blocked"
    """A pre-tool hook refused the call."""
    TIMEOUT = "timeout"
    """The tool outran its own time limit."""
    CANCELLED = "cancelled"
    """The run was interrupted before or while the tool ran."""
    LIMIT = "limit"
    """The request's ``max_tool_calls`` was used up."""
    AWAITING_APPROVAL = "awaiting_approval"
    """The call did not run: it waits for an approval that a later turn gives or refuses."""


class ApprovalDecision(StrEnum):
    """How an approval request was answered."""

    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    """Nobody answered in time: the call does not run, as if denied."""


@event
class CallRecord:
    """One model call of a run: who served it and what it cost."""

    provider: str
    model: str
    usage: Usage
    cost_usd: float = 0.0
    """What it cost at the agent's prices (``AgentConfig.prices``); 0 when unpriced."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceFile:
    """A file a run created or changed in its workspace: what an answer announces."""

    path: str
    """Relative to the workspace, with ``/`` separators."""
    bytes: int
    created: bool
    """New in this run (else it was there before and changed)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallImage:
    """An image a tool call created or changed in its workspace: what a view shows as the
    call's own output (a ``code_interpreter_call``'s image)."""

    path: str
    """Relative to the workspace, with ``/`` separators."""
    media_type: str
    """``image/png``, ``image/jpeg``, ``image/gif`` or ``image/webp``, by its first bytes."""
    data: str | None = None
    """The image in base64, when nothing will serve the file later (the run's workspace is
    removed when it ends) and it is small enough; None otherwise."""


@event(kw_only=False)
class _Event:
    run_id: str
    """The run this event belongs to."""
    seq: int
    """Position in the run's event sequence: 0, 1, 2, ... without gaps."""


# --- the run's lifecycle ----------------------------------------------------------------------


@event
class RunStarted(_Event):
    kind: Literal["run_started"] = "run_started"
    task_id: str
    """The caller's task id (generated when not given); stable across a session's runs."""
    session_id: str | None = None
    """The session the run continues, when the caller named one."""
    model: str
    """The model the first call goes to."""
    provider: str
    """The provider the first call goes to."""
    budget: int
    """Model calls the run may make (its iteration budget; a sub-agent's is shared)."""
    streamed: bool = True
    """The model's replies are streamed as they are generated. False (nobody watches, e.g. a
    non-streaming client): each reply's text may arrive in one delta once it is complete."""


@event
class BudgetWarning(_Event):
    kind: Literal["budget_warning"] = "budget_warning"
    tier: Literal["caution", "warning"]
    used: int
    total: int


@event
class CompressionPerformed(_Event):
    kind: Literal["compression"] = "compression"
    tokens_before: int
    """Estimated prompt tokens of the transcript before compression."""
    tokens_after: int
    messages_before: int
    messages_after: int
    session_id: str | None
    """The child session that continues the conversation from here; None when the
    conversation is kept in no session (a compaction asked for on its own)."""
    parent_session_id: str | None
    """The session that was compressed (the lineage)."""
    messages: list[Message]
    """The compressed transcript (the child session starts from it)."""
    summarised: bool
    """False when only old tool outputs were pruned (no summary was written)."""
    summariser_call: CallRecord | None = None
    """The model call that wrote the summary, when one answered (its usage is the run's)."""


@event
class MessageAdded(_Event):
    kind: Literal["message_added"] = "message_added"
    index: int
    """Position of the message in the run's transcript (which is its session's)."""
    message: Message
    """Appended to the transcript; persist it now (an assistant tool-call message arrives
    before its tools run)."""


@event
class RunFinished(_Event):
    kind: Literal["run_finished"] = "run_finished"
    exit_reason: ExitReason
    final_text: str
    """The final answer; on an interrupt, whatever text was streamed before it."""
    partial: bool = False
    """True when ``final_text`` is an unfinished answer (interrupted mid-stream)."""
    notice: bool = False
    """True when ``final_text`` is the agent's notice that the run stopped short (out of
    iterations or of money) with no answer of the model's to show: shown and kept as its
    answer, but not the model's words."""
    iterations: int
    usage: Usage
    """Summed over every model call of the run (a compression's summariser included)."""
    model_calls: int
    cost_usd: float = 0.0
    """Summed over ``calls`` (0 when the agent has no prices)."""
    error: str | None = None
    """What went wrong, naming the upstream failure, when the run did not complete."""
    content_filtered: bool = False
    """The run failed because the upstream's content filter stopped the model's answer
    (``final_text`` is what it had said by then): chat says ``finish_reason:
    "content_filter"``, Responses ``incomplete`` for ``content_filter``, as OpenAI does."""
    retry_after: float | None = None
    """Set when the run failed because the upstream refused it for its rate (the last
    provider the chain tried, whatever the earlier ones failed with: its last word was
    "wait") before anything acted (no model call had answered, no approved call ran; after,
    the run did work and is a plain failure): seconds after which it may answer. A waiting
    client is then told 429 with ``retry-after`` — its SDK retries — not 502."""
    interrupt_source: InterruptSource | None = None
    """Who interrupted the run; set exactly when ``exit_reason`` is ``interrupted``."""
    session_id: str | None = None
    """The session the run ended in: the one it started in, or the child a compression
    moved it to. None when the caller named no session."""
    transcript_length: int = 0
    """Messages in the run's transcript (its session's) when it ended."""
    calls: list[CallRecord] = field(default_factory=list)
    """Every model call, in order: the provider and model that served it and its usage."""
    refusal: str | None = None
    """The model declined to answer, saying this (``final_text`` is then empty). A completed
    run: the model answered, with a refusal."""
    files: list[WorkspaceFile] = field(default_factory=list)
    """Files the run created or changed in its conversation's workspace, set by whoever
    watches the workspace (the server compares it before and after the run); empty otherwise."""


@event
class SubagentEvent(_Event):
    kind: Literal["subagent"] = "subagent"
    call_id: str
    """The ``delegate_task`` call that spawned the child."""
    child_index: int
    """Which of the call's tasks (0-based)."""
    event: AgentEvent
    """The child's own event, with the child's run id and sequence number."""


# --- model calls ------------------------------------------------------------------------------


@event
class ModelCallStarted(_Event):
    kind: Literal["model_call_started"] = "model_call_started"
    iteration: int
    """The budgeted model call this is (1-based; an invalid-JSON retry repeats a number)."""
    provider: str
    """The provider the call goes to first (a fallback may move it: ``FallbackActivated``)."""
    model: str
    grace: bool = False
    """The tool-less last call made after the budget ran out, to get a final answer."""


@event
class ReasoningDelta(_Event):
    kind: Literal["reasoning_delta"] = "reasoning_delta"
    text: str
    """A piece of the model's reasoning, as streamed."""


@event
class TextDelta(_Event):
    kind: Literal["text_delta"] = "text_delta"
    text: str
    """A piece of the assistant's answer, as streamed."""


@event
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


@event
class RetryScheduled(_Event):
    kind: Literal["retry"] = "retry"
    provider: str
    attempt: int
    """The attempt that failed (1 for the first call)."""
    delay_s: float
    """How long the run waits before calling again (interruptible)."""
    reason: str
    """The failure's classification (an ``ErrorKind`` value: ``rate_limit``, ...)."""


@event
class FallbackActivated(_Event):
    kind: Literal["fallback"] = "fallback"
    from_provider: str
    to_provider: str
    reason: str
    """The failure classification that caused the switch (an ``ErrorKind`` value)."""


@event
class StepFinished(_Event):
    kind: Literal["step_finished"] = "step_finished"
    iteration: int
    """1-based count of model calls that consumed the budget so far."""
    usage: Usage
    """This model call's usage."""
    provider: str
    model: str
    finish_reason: str
    cost_usd: float = 0.0
    """What this call cost at the agent's prices (0 when unpriced): its ``CallRecord``'s."""


# --- tools ------------------------------------------------------------------------------------


@event
class ToolStarted(_Event):
    kind: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    arguments: dict[str, Any]
    """The validated (and type-coerced) arguments."""
    summary: str
    """One human-readable line, e.g. ``read_file README.md``."""


@event
class ToolFinished(_Event):
    kind: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    outcome: ToolOutcome
    duration_s: float
    result_preview: str
    """The start of the result (``PREVIEW_CHARS`` at most: enough for a tool card)."""
    error: str | None = None
    """Why the call failed, in words for the model and for people, when it did."""
    result_chars: int = 0
    """The whole result's length: more than the preview's when the preview is cut."""
    images: list[CallImage] = field(default_factory=list)
    """Images the call created or changed in its workspace, oldest first; set by whoever
    watches the workspace (the server, for ``code`` calls), empty otherwise."""

    @property
    def ok(self) -> bool:
        return self.outcome is ToolOutcome.SUCCESS


@event
class ToolProgress(_Event):
    kind: Literal["tool_progress"] = "tool_progress"
    call_id: str
    name: str
    output: str
    """What the tool wrote since its last report (a command's output as it runs)."""


@event
class ImagePartial(_Event):
    """A tool generating an image (``generate_image``) received one of its partial images,
    as the images API streams them: a view showing the call as an ``image_generation_call``
    streams it; the others ignore it (the final image is the tool's result)."""

    kind: Literal["image_partial"] = "image_partial"
    call_id: str
    name: str
    index: int
    """0-based, in the order the upstream sent them."""
    image_b64: str
    """The partial image, base64 (as the images API sends it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """A web page a tool read or found: what a citation of the answer may point to."""

    url: str
    title: str
    snippet: str = ""


@event
class SourcesFound(_Event):
    """A tool read or found web pages (``web_fetch``, ``web_search``). Views cite those the
    answer names (``url_citation`` annotations) and show them as sources (Open WebUI chips)."""

    kind: Literal["sources_found"] = "sources_found"
    call_id: str
    name: str
    sources: list[Source]
    read: bool
    """The tool read these pages (a fetch), rather than only listing them (a search)."""


@event
class ApprovalRequested(_Event):
    kind: Literal["approval_requested"] = "approval_requested"
    approval_id: str
    """What an answer names (``POST /v1/runs/{run}/approvals/{approval_id}``)."""
    call_id: str
    name: str
    arguments: dict[str, Any]
    """The arguments the call would run with: what the approver judges."""
    reason: str
    """Why the action needs approval."""


@event
class ApprovalResolved(_Event):
    kind: Literal["approval_resolved"] = "approval_resolved"
    approval_id: str
    call_id: str
    name: str
    """The tool the approval was asked for."""
    decision: ApprovalDecision

    @property
    def approved(self) -> bool:
        return self.decision is ApprovalDecision.APPROVED


@event
class PlanMade(_Event):
    """The agent wrote down a plan before acting on a complex task, or revised it after too
    many of the tool calls since the last plan failed (``agent/planner.py``)."""

    kind: Literal["plan"] = "plan"
    steps: list[str]
    """The plan's steps, in order (also the session's todo list)."""
    replanned: bool = False
    reason: str | None = None
    """Why the plan was made again (None for a first plan)."""


@event
class Steered(_Event):
    """A message someone steered into the running turn (``Agent.steer``). Applied: it was
    appended to the transcript (its ``MessageAdded`` precedes this) before the next model
    call. Not applied: the run ended before another model call could see it."""

    kind: Literal["steered"] = "steered"
    text: str
    applied: bool


@event
class ClientToolCallsPending(_Event):
    kind: Literal["client_tool_calls"] = "client_tool_calls"
    tool_calls: list[ToolCall]
    """Calls of tools the client declared; the run ends awaiting their results."""


RunLifecycleEvent = (
    RunStarted
    | BudgetWarning
    | CompressionPerformed
    | MessageAdded
    | Steered
    | RunFinished
    | SubagentEvent
)
ModelCallEvent = (
    ModelCallStarted
    | ReasoningDelta
    | TextDelta
    | ToolCallGenerating
    | RetryScheduled
    | FallbackActivated
    | StepFinished
)
ToolEvent = (
    ToolStarted
    | ToolProgress
    | ImagePartial
    | SourcesFound
    | ToolFinished
    | ApprovalRequested
    | ApprovalResolved
    | ClientToolCallsPending
)
AgentEvent = RunLifecycleEvent | ModelCallEvent | ToolEvent | PlanMade
"""Every event a run says. Consumers ``match`` on it and end in ``assert_never``."""


P = ParamSpec("P")
E = TypeVar("E", bound=AgentEvent)


class Emit(Protocol):
    """``emit(EventClass, **fields)``: make the next event of a run and deliver it.

    Typed against the event class: every event starts with the positional ``run_id`` and
    ``seq`` that the emitter stamps, so the rest of the signature is the class's own fields,
    and a misspelt or mistyped field is a type error at the call."""

    def __call__(
        self,
        event_class: Callable[Concatenate[str, int, P], E],
        /,
        *args: P.args,
        **fields: P.kwargs,
    ) -> E: ...


def emit_nowhere(
    event_class: Callable[Concatenate[str, int, P], E], /, *args: P.args, **fields: P.kwargs
) -> E:
    """An :class:`Emit` for code running outside any run: the event is made and dropped."""
    return event_class("", -1, *args, **fields)
