"""The shapes of what the server answers, as pydantic models for the OpenAPI document.

The views build their answers as plain dicts (``server/views/``); these models only describe
them. A route whose handler returns one of these shapes as a plain dict names it as its
``response_model`` (FastAPI then checks the dict against it); every other route lists it in
``responses=`` for the document alone. Objects that may carry more keys than listed allow them.
A field typed ``Omittable[X]`` is a key that may be missing, never ``null``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from hermes_core.events import ExitReason
from server.runs.manager import RunStatus

_T = TypeVar("_T")
Omittable: TypeAlias = _T | SkipJsonSchema[None]
"""A key that is sometimes absent: documented as ``X`` and not required."""


class _Shape(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class _Open(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")


# --- errors ---------------------------------------------------------------------------------------


class ErrorBody(_Shape):
    message: str
    """What went wrong, readable by a person."""
    type: str
    """``invalid_request_error``, ``authentication_error``, ``permission_error``,
    ``not_found_error``, ``conflict_error``, ``rate_limit_error``, ``server_error``, …"""
    param: str | None
    """The request field or header at fault, if one is."""
    code: str | None
    """A stable machine-readable code, e.g. ``model_not_found``, ``rate_limit_exceeded``."""


class ErrorEnvelope(_Shape):
    """Every error the server answers, whatever its status: OpenAI's error envelope."""

    error: ErrorBody


# --- shared pieces --------------------------------------------------------------------------------


class HermesSummary(_Shape):
    """The ``hermes`` extension object: how the agent run really ended."""

    run_id: str
    """The run, for ``/v1/runs/{run_id}``."""
    session_id: str | None
    """The server-side session the run continued, if any."""
    exit_reason: ExitReason
    iterations: int
    """Agent loop iterations (model calls that could call tools)."""
    model_calls: int
    """Model calls in all, retries and fallbacks included."""
    error: str | None
    """What went wrong when the run did not complete."""


class InputTokensDetails(_Shape):
    cached_tokens: int
    """Part of the input read from the provider's prompt cache."""
    cache_write_tokens: int
    """Part of the input written to the provider's prompt cache."""


class OutputTokensDetails(_Shape):
    reasoning_tokens: int
    """Part of the output spent on reasoning."""


class FunctionCall(_Shape):
    name: str
    arguments: str
    """The arguments as a JSON string."""


class ToolCall(_Shape):
    """A call of a tool the client declared: the client runs it and sends the result back."""

    id: str
    type: Literal["function"]
    function: FunctionCall


# --- Chat Completions -----------------------------------------------------------------------------

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class ChatUsage(_Shape):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: InputTokensDetails
    completion_tokens_details: OutputTokensDetails


class ChatMessage(_Open):
    role: Literal["assistant"]
    content: str | None
    """The final answer; null when the run ends awaiting the client's tool calls."""
    refusal: None
    annotations: list[Any]
    reasoning_content: Omittable[str] = None
    """The model's reasoning and one line per server tool step, when there were any."""
    tool_calls: Omittable[list[ToolCall]] = None


class ChatChoice(_Shape):
    index: int
    message: ChatMessage
    logprobs: None
    finish_reason: FinishReason
    """``stop`` only for a clean completion; any unfinished ending is ``length``."""


class ChatCompletion(_Open):
    """``POST /v1/chat/completions`` without ``stream``: the run's answer, once it ended."""

    id: str
    """``chatcmpl-…``; also accepted as a run id by ``/v1/runs/{run_id}``."""
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
    """Summed over every model call of the run."""
    hermes: Omittable[HermesSummary] = None
    """Absent only on Open WebUI's side tasks (titles, tags), which are no agent runs."""


class ToolProgress(_Shape):
    """A server tool step, structured (also, with ``type: hermes:tool_progress``, a Responses
    stream event when asked for with ``X-Hermes-Progress: events``)."""

    type: Literal["tool"]
    phase: Literal["started", "finished"]
    call_id: str
    name: str
    arguments: Omittable[dict[str, Any]] = None
    """``started`` only."""
    ok: Omittable[bool] = None
    """``finished`` only, like the fields below."""
    duration_ms: Omittable[int] = None
    preview: Omittable[str] = None
    """The start of the tool's result."""
    error: Omittable[str | None] = None


class ChunkToolCall(ToolCall):
    index: int


class ChatDelta(_Open):
    role: Omittable[Literal["assistant"]] = None
    """First chunk only."""
    content: Omittable[str] = None
    """A piece of the answer."""
    reasoning_content: Omittable[str] = None
    """A piece of the model's reasoning, or one line per tool step or status change."""
    tool_calls: Omittable[list[ChunkToolCall]] = None
    """The client's tool calls, complete, in one chunk."""
    hermes: Omittable[ToolProgress] = None


class ChunkChoice(_Shape):
    index: int
    delta: ChatDelta
    logprobs: None
    finish_reason: FinishReason | None


class ChatCompletionChunk(_Open):
    """One SSE frame of ``POST /v1/chat/completions`` with ``stream: true``.

    Each frame is one ``data: <json>`` line (never ``event:`` or ``id:``); ``data: [DONE]`` ends
    the stream, and ``: keep-alive`` comments fill quiet spells. The last choice chunk has an
    empty delta, the ``finish_reason`` and ``hermes``; with ``stream_options.include_usage`` a
    chunk with no choices and the ``usage`` follows it. A run that fails mid-stream sends
    ``data: {"error": {...}}`` (an ``ErrorEnvelope``) instead. In Open WebUI mode the stream also
    carries Responses-style ``response.output_item.added`` frames (tool cards) and
    ``{"event": {"type": "status", ...}}`` frames.
    """

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Omittable[ChatUsage | None] = None
    """With ``include_usage``: null on every chunk but the usage chunk."""
    hermes: Omittable[HermesSummary] = None
    """On the chunk with the ``finish_reason``."""


# --- Responses: output items ----------------------------------------------------------------------

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputText(_Open):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any]


class SummaryText(_Open):
    type: Literal["summary_text"]
    text: str


class InputText(_Open):
    type: Literal["input_text"]
    text: str


class MessageItem(_Open):
    """Model text: the answer."""

    type: Literal["message"]
    id: str
    role: Literal["assistant"]
    status: ItemStatus
    content: list[OutputText]


class ReasoningItem(_Open):
    """Model reasoning, and one summary line per server tool step, status change or fallback."""

    type: Literal["reasoning"]
    id: str
    status: ItemStatus
    summary: list[SummaryText]


class FunctionCallItem(_Open):
    """A call of a client-declared tool (or, in Open WebUI mode, a server tool's card)."""

    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    """The arguments as a JSON string."""
    status: ItemStatus


class FunctionCallOutputItem(_Open):
    """A server tool's output (Open WebUI mode only)."""

    type: Literal["function_call_output"]
    id: str
    call_id: str
    output: list[InputText]
    status: ItemStatus


OutputItem = Annotated[
    MessageItem | ReasoningItem | FunctionCallItem | FunctionCallOutputItem,
    Field(discriminator="type"),
]


# --- Responses: the Response object ---------------------------------------------------------------


class ResponseUsage(_Shape):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(_Shape):
    reason: Literal["max_output_tokens", "max_messages"]
    """``max_messages`` when the iteration budget ran out (``hermes.exit_reason`` says so)."""


class ResponseError(_Shape):
    code: str
    message: str


class FunctionTool(_Shape):
    """A client-declared function tool, echoed (the agent's own tools are never listed)."""

    type: Literal["function"]
    name: str
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None


class TextFormat(_Shape):
    type: Literal["text"]


class TextConfig(_Open):
    format: TextFormat


class ReasoningConfig(_Shape):
    effort: str | None
    summary: str | None


class ResponseObject(_Open):
    """A Response: every one of Open Responses' 31 keys, echoing the request, plus ``hermes``
    once the run has ended. ``status`` is ``cancelled`` for a stopped run."""

    id: str
    object: Literal["response"]
    created_at: int
    completed_at: int | None
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    incomplete_details: IncompleteDetails | None
    model: str
    previous_response_id: str | None
    instructions: str | None
    output: list[OutputItem]
    error: ResponseError | None
    tools: list[FunctionTool]
    tool_choice: str | dict[str, Any]
    truncation: Literal["auto", "disabled"]
    parallel_tool_calls: bool
    text: TextConfig
    top_p: float
    presence_penalty: float
    frequency_penalty: float
    temperature: float
    top_logprobs: int
    reasoning: ReasoningConfig | None
    usage: ResponseUsage | None
    """Null until the run has ended."""
    max_output_tokens: int | None
    max_tool_calls: int | None
    store: bool
    background: bool
    service_tier: str
    metadata: dict[str, str]
    safety_identifier: str | None
    prompt_cache_key: str | None
    user: Omittable[str] = None
    """Echoed when the request had one."""
    hermes: Omittable[HermesSummary] = None
    """Once the run has ended."""


# --- Responses: stream events ---------------------------------------------------------------------

ResponseEventType = Literal[
    "response.created",
    "response.queued",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.content_part.added",
    "response.content_part.done",
    "response.output_text.delta",
    "response.output_text.done",
    "response.reasoning_summary_part.added",
    "response.reasoning_summary_part.done",
    "response.reasoning_summary_text.delta",
    "response.reasoning_summary_text.done",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
    "hermes:tool_progress",
]


class ResponseStreamEvent(_Open):
    """One event of a Responses stream, sent as ``event: <type>`` + ``data: <json>``.

    Canonical order: ``response.created`` (sequence number 0), then ``response.in_progress`` (or
    ``response.queued`` first, for a background response); then, item after item (``output_index``
    its position in ``response.output``): ``response.output_item.added``, its parts —
    ``content_part.added`` → ``output_text.delta``* → ``output_text.done`` → ``content_part.done``
    for a message, ``reasoning_summary_part.added`` → ``reasoning_summary_text.delta``* → ``…done``
    → ``reasoning_summary_part.done`` for reasoning, ``function_call_arguments.delta`` →
    ``…done`` for a function call — and ``response.output_item.done``; then exactly one terminal
    event, ``response.completed``, ``response.incomplete`` or ``response.failed`` (after an
    ``error`` event); then ``data: [DONE]``. ``: keep-alive`` comments fill quiet spells.
    ``hermes:tool_progress`` events (only with ``X-Hermes-Progress: events``) carry the fields
    of ``ToolProgress`` at the top level.
    """

    type: ResponseEventType
    sequence_number: int
    """0, 1, 2, … without gaps; ``starting_after`` resumes after one."""
    response: Omittable[ResponseObject] = None
    """``response.created`` / ``.queued`` / ``.in_progress`` and the terminal events."""
    output_index: Omittable[int] = None
    item_id: Omittable[str] = None
    item: Omittable[OutputItem] = None
    """``output_item.added`` (in progress) and ``output_item.done`` (final)."""
    content_index: Omittable[int] = None
    summary_index: Omittable[int] = None
    part: Omittable[Annotated[OutputText | SummaryText, Field(discriminator="type")]] = None
    delta: Omittable[str] = None
    text: Omittable[str] = None
    """The part's whole text, on ``….done``."""
    arguments: Omittable[str | dict[str, Any]] = None
    """The whole JSON arguments string on ``function_call_arguments.done``; the parsed object
    on ``hermes:tool_progress``."""
    logprobs: Omittable[list[Any]] = None
    code: Omittable[str] = None
    """``error`` events: OpenAI's flat fields, and Open Responses' nested ``error``."""
    message: Omittable[str] = None
    param: Omittable[str | None] = None
    error: Omittable[ErrorBody | str | None] = None
    """The error on ``error`` events; the tool's error on ``hermes:tool_progress``."""


class ResponseDeleted(_Shape):
    id: str
    object: Literal["response.deleted"]
    deleted: bool


class InputItem(_Open):
    """An input item as the request gave it, with its ``type`` and ``id`` filled in."""

    type: str
    id: str


class InputItemList(_Shape):
    object: Literal["list"]
    data: list[InputItem]
    first_id: str | None
    last_id: str | None
    has_more: bool


class CompactionItem(_Shape):
    """Feed it back as an input item: it stands for the whole conversation so far."""

    type: Literal["compaction"]
    id: str
    encrypted_content: str
    """The compressed conversation (not encrypted: the client may read it)."""


class ResponseCompaction(_Shape):
    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[CompactionItem]
    usage: ResponseUsage


# --- native runs ----------------------------------------------------------------------------------


class RunUsage(_Open):
    """Tokens summed over every model call of the run."""

    input_tokens: int
    """The whole prompt, cache reads and writes included."""
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    """Generated tokens, reasoning included."""
    reasoning_tokens: int


class RunObject(_Shape):
    """An agent run, live or (after a restart) from the database."""

    id: str
    object: Literal["hermes.run"]
    endpoint: Literal["chat.completions", "responses"]
    model: str
    completion_id: str | None
    """The ``chatcmpl-…`` or ``resp_…`` id the run answers."""
    session_id: str | None
    status: RunStatus
    exit_reason: ExitReason | None
    error: str | None
    created_at: int
    ended_at: int | None
    iterations: int | None
    usage: RunUsage | None
    """Once the run has ended."""
    events: int
    """Events in the replayable log (0 for a run known only from the database)."""


class RunStopped(_Shape):
    """The stop was requested; the run ends as ``interrupted`` shortly."""

    id: str
    object: Literal["hermes.run"]
    status: RunStatus


AgentEventKind = Literal[
    "run_started",
    "model_call_started",
    "reasoning_delta",
    "text_delta",
    "tool_call_generating",
    "tool_started",
    "tool_finished",
    "approval_requested",
    "approval_resolved",
    "budget_warning",
    "retry",
    "fallback",
    "compression",
    "message_added",
    "step_finished",
    "client_tool_calls",
    "run_finished",
    "subagent",
]


class RunEvent(_Open):
    """One native agent event (``hermes_core.events``), sent as ``id: <seq>``,
    ``event: <kind>`` and ``data: <json>``; the stream closes after ``run_finished``. Resume
    with ``after`` or ``Last-Event-ID``."""

    run_id: str
    seq: int
    """Position in the run's event log: 0, 1, 2, … without gaps."""
    kind: AgentEventKind
