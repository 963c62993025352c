"""The Chat Completions frames the chat view builds, as ``TypedDict``s.

The views build their answers as plain dicts (fast: one ``orjson.dumps`` each); these types let
the type checker see every key they write, at no cost at run time. What the frames mean for
clients is documented by the models in :mod:`server.protocol.schemas.chat`.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from server.errors import ErrorBody


class ChatUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]
    completion_tokens_details: dict[str, int]


class HermesSummary(TypedDict):
    run_id: str
    session_id: str | None
    exit_reason: str
    iterations: int
    model_calls: int
    cost_usd: float
    error: str | None


class FunctionCall(TypedDict):
    name: str
    arguments: str


class ToolCallDelta(TypedDict):
    index: NotRequired[int]
    """Present in stream chunks, absent in a completion's message."""
    id: str
    type: Literal["function"]
    function: FunctionCall


class Delta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning_content: str
    refusal: str
    tool_calls: list[ToolCallDelta]
    annotations: list[dict[str, Any]]
    """``url_citation``s of the answer, in one chunk after its text."""
    hermes: dict[str, Any]
    """Structured tool progress (vendor extension)."""


class ChunkChoice(TypedDict):
    index: int
    delta: Delta
    logprobs: None
    finish_reason: str | None


class Chunk(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: NotRequired[ChatUsage | None]
    hermes: NotRequired[HermesSummary]


class StreamError(TypedDict):
    error: ErrorBody


class CardItemAdded(TypedDict):
    """Open WebUI's tool card or Thought block: a Responses-style item in the chat stream (an
    item with the id of one already sent replaces it)."""

    type: Literal["response.output_item.added"]
    output_index: int
    item: dict[str, Any]


class ThoughtDelta(TypedDict):
    """More text for the Thought block Open WebUI received last (it goes to the last item)."""

    type: Literal["response.reasoning_text.delta"]
    item_id: str
    delta: str


class StatusEvent(TypedDict):
    type: Literal["status"]
    data: dict[str, Any]


class SourceEvent(TypedDict):
    type: Literal["source"]
    data: dict[str, Any]


class StatusFrame(TypedDict):
    """Open WebUI's status line."""

    event: StatusEvent


class SourceFrame(TypedDict):
    """Open WebUI's source chip."""

    event: SourceEvent


ChatFrame = Chunk | StreamError | CardItemAdded | ThoughtDelta | StatusFrame | SourceFrame
"""Anything the chat stream sends as one ``data:`` frame."""


class CompletionMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    refusal: str | None
    annotations: list[Any]
    reasoning_content: NotRequired[str]
    tool_calls: NotRequired[list[ToolCallDelta]]


class CompletionChoice(TypedDict):
    index: int
    message: CompletionMessage
    logprobs: None
    finish_reason: str


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: ChatUsage
    hermes: HermesSummary
