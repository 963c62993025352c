"""The shapes of ``POST /v1/chat/completions``: a completion and its stream chunks."""

from __future__ import annotations

from typing import Any, Literal

from server.protocol.schemas.common import (
    HermesSummary,
    InputTokensDetails,
    Omittable,
    Open,
    OutputTokensDetails,
    Shape,
    ToolCall,
)

# --- Chat Completions -----------------------------------------------------------------------------

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]


class ChatUsage(Shape):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: InputTokensDetails
    completion_tokens_details: OutputTokensDetails


class ChatMessage(Open):
    role: Literal["assistant"]
    content: str | None
    """The final answer; null when the run ends awaiting the client's tool calls, or when
    the model refused (``refusal``)."""
    refusal: str | None
    """Why the model declined to answer, when it did (structured outputs' refusal)."""
    annotations: list[Any]
    reasoning_content: Omittable[str] = None
    """The model's reasoning and one line per server tool step, when there were any."""
    tool_calls: Omittable[list[ToolCall]] = None


class ChatChoice(Shape):
    index: int
    message: ChatMessage
    logprobs: None
    finish_reason: FinishReason
    """``stop`` only for a clean completion; any unfinished ending is ``length``."""


class ChatCompletion(Open):
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


class ToolProgress(Shape):
    """A server tool step, structured (also, with ``type: hermes:tool_progress``, a Responses
    stream event when asked for with ``X-Hermes-Progress: events``)."""

    type: Literal["tool"]
    phase: Literal["started", "progress", "finished"]
    call_id: str
    name: str
    arguments: Omittable[dict[str, Any]] = None
    """``started`` only."""
    output: Omittable[str] = None
    """``progress`` only: what the running tool has written so far."""
    ok: Omittable[bool] = None
    """``finished`` only, like the fields below."""
    outcome: Omittable[str] = None
    """How the call ended: ``success``, ``error``, ``timeout``, ``denied``, …"""
    duration_ms: Omittable[int] = None
    preview: Omittable[str] = None
    """The start of the tool's result."""
    error: Omittable[str | None] = None


class ApprovalProgress(Shape):
    """A server tool call waiting for a person's approval (``requested``), or the answer it
    got (``resolved``)."""

    type: Literal["approval"]
    phase: Literal["requested", "resolved"]
    approval_id: str
    call_id: str
    name: str
    arguments: Omittable[dict[str, Any]] = None
    """``requested`` only, like ``reason``."""
    reason: Omittable[str] = None
    decision: Omittable[Literal["approved", "denied", "expired"]] = None
    """``resolved`` only (``expired``: nobody answered in time, and the call did not run)."""


class PlanProgress(Shape):
    """The plan the agent wrote before acting on a complex task, or wrote again."""

    type: Literal["plan"]
    steps: list[str]
    replanned: bool
    reason: str | None
    """Why the plan was made again (null for a first plan)."""


class ChunkToolCall(ToolCall):
    index: int


class ChatDelta(Open):
    role: Omittable[Literal["assistant"]] = None
    """First chunk only."""
    content: Omittable[str] = None
    """A piece of the answer."""
    reasoning_content: Omittable[str] = None
    """A piece of the model's reasoning, or one line per tool step or status change."""
    refusal: Omittable[str] = None
    """Why the model declined to answer, in one chunk before the last."""
    tool_calls: Omittable[list[ChunkToolCall]] = None
    """The client's tool calls, complete, in one chunk."""
    annotations: Omittable[list[Any]] = None
    """The answer's citations (``url_citation`` and files), in one chunk before the last."""
    hermes: Omittable[ToolProgress | ApprovalProgress | PlanProgress] = None
    """Structured progress: a tool step, an approval, a plan (``type`` says which)."""


class ChunkChoice(Shape):
    index: int
    delta: ChatDelta
    logprobs: None
    finish_reason: FinishReason | None


class ChatCompletionChunk(Open):
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
