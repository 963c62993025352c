"""The internal message format: OpenAI Chat-style dicts plus a few private keys.

Every provider adapter converts from this shape at its edge. Besides the OpenAI keys
(``role``, ``content``, ``tool_calls``, ``tool_call_id``, ``name``) an assistant message may carry:

- ``reasoning``: the model's visible reasoning text, for display and for providers that accept it;
- ``reasoning_replay``: provider-owned data that must be sent back verbatim on the next call
  (Anthropic thinking blocks with their signatures, Responses reasoning items). It is tagged with
  the api_mode that produced it; other adapters drop it, because a signature is only valid where
  it was issued.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

Role = Literal["system", "user", "assistant", "tool"]


class FunctionCall(TypedDict):
    name: str
    arguments: str
    """The arguments as the model produced them: a JSON string, possibly malformed."""


class ToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: FunctionCall


class ReasoningReplay(TypedDict):
    api_mode: str
    """The api_mode whose adapter produced ``items`` and may replay them."""
    items: list[dict[str, Any]]


class Message(TypedDict, total=False):
    role: Required[Role]
    content: str | list[dict[str, Any]] | None
    """Text, or OpenAI content parts (``text``, ``image_url``)."""
    tool_calls: list[ToolCall]
    tool_call_id: str
    name: str
    reasoning: str
    reasoning_replay: NotRequired[ReasoningReplay]
    refusal: str
    """The model declined to answer (OpenAI's ``refusal``), instead of ``content``."""


def text_of(content: str | list[dict[str, Any]] | None) -> str:
    """The plain text of a message's content (text parts joined, other parts skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
