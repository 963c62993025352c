"""Build the messages one model call sees, from the transcript, without touching it.

The transcript is the record; the API messages are a view of it that every provider accepts:

- roles alternate: after the system prompt, user and assistant take turns; an assistant message
  with tool calls is followed by exactly its tool results, in call order; two users or two
  assistants in a row are merged; a tool result without its call is dropped; a call without a
  result gets a placeholder result (so an interrupted or crashed step stays valid);
- text is cleaned: lone surrogates (which no JSON encoder of a provider accepts) are removed,
  line endings normalised and trailing whitespace trimmed, so the prompt prefix stays stable;
- oversize tool results are cut for the model's view only.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hermes_core.messages import Message, ToolCall, text_of

_LONE_SURROGATES = re.compile(r"[\ud800-\udfff]")
MISSING_RESULT = "[No result was recorded for this tool call.]"
CONTINUE_PLACEHOLDER = "(continuing the conversation)"
SYSTEM_NOTE_PREFIX = "[System instruction] "
"""How a system message from the middle of the history reaches the model."""


def clean_text(text: str) -> str:
    if not text.isascii():  # CPython knows this of every str without looking: ASCII has none
        text = _LONE_SURROGATES.sub("", text)
    return text.replace("\r\n", "\n").rstrip()


def _clean_content(content: Any) -> Any:
    if isinstance(content, str):
        return clean_text(content)
    if isinstance(content, list):
        parts = []
        for part in content:
            part = dict(part)
            if isinstance(part.get("text"), str):
                part["text"] = clean_text(part["text"])
            parts.append(part)
        return parts
    return content


def _as_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if content else []


def _merge_content(first: Any, second: Any) -> Any:
    if isinstance(first, str | None) and isinstance(second, str | None):
        return "\n\n".join(text for text in (first, second) if text)
    return _as_parts(first) + _as_parts(second)


def truncate_result(content: str, limit: int) -> str:
    if len(content) <= limit:
        return content
    return f"{content[:limit]}\n[Output truncated; original was {len(content)} chars]"


def _truncate_content(content: Any, limit: int) -> Any:
    """A tool result cut to ``limit`` characters: the text, or the text parts of a result
    with images (whose images are left as they are)."""
    if isinstance(content, str):
        return truncate_result(content, limit)
    if isinstance(content, list):
        return [
            {**part, "text": truncate_result(part["text"], limit)}
            if isinstance(part.get("text"), str)
            else part
            for part in content
        ]
    return content


class _Builder:
    """Walks the transcript once, emitting a well-formed message list."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        self._open_calls: list[ToolCall] = []
        self._results: dict[str, Message] = {}

    def _close_tool_block(self) -> None:
        """Emit the open assistant's results in call order, inventing missing ones."""
        for call in self._open_calls:
            result = self._results.get(call["id"])
            self.out.append(
                result
                if result is not None
                else {"role": "tool", "tool_call_id": call["id"], "content": MISSING_RESULT}
            )
        self._open_calls, self._results = [], {}

    def add(self, message: Message) -> None:
        role = message["role"]
        if role == "system":
            # The system prompt is the agent's; a system message in the history is an
            # instruction given at that point of the conversation: a user-side note there.
            text = text_of(message.get("content"))
            if not text:
                return
            message = {"role": "user", "content": f"{SYSTEM_NOTE_PREFIX}{text}"}
            role = "user"
        if role == "tool":
            call_id = message.get("tool_call_id")
            open_ids = {call["id"] for call in self._open_calls}
            if call_id in open_ids and call_id not in self._results:
                self._results[str(call_id)] = message
            return  # anything else is an orphan result: drop it
        self._close_tool_block()
        last = self.out[-1] if self.out else None
        if role == "assistant" and last is None:
            self.out.append({"role": "user", "content": CONTINUE_PLACEHOLDER})
            last = self.out[-1]
        if last is not None and last["role"] == role and not last.get("tool_calls"):
            merged = copy.copy(last)
            merged["content"] = _merge_content(last.get("content"), message.get("content"))
            if message.get("tool_calls"):
                merged["tool_calls"] = message["tool_calls"]
            self.out[-1] = merged
        else:
            self.out.append(message)
        self._open_calls = list(self.out[-1].get("tool_calls") or [])

    def finish(self) -> list[Message]:
        self._close_tool_block()
        return self.out


def prepare_messages(
    transcript: Sequence[Message],
    *,
    system_prompt: str | None,
    max_tool_result_chars: int,
    tool_result_limits: Mapping[str, int] | None = None,
    last_tool_note: str | None = None,
    closing_user_note: str | None = None,
) -> list[Message]:
    """The messages for one model call (a new list of new dicts; ``transcript`` is untouched).

    ``tool_result_limits`` maps a tool call id to a tighter per-tool limit.
    ``last_tool_note`` is appended to the final tool result (budget pressure);
    ``closing_user_note`` is added as a last user message (the grace call's request).
    """
    builder = _Builder()
    limits = tool_result_limits or {}
    for original in transcript:
        message: Message = original.copy()
        if "content" in message:
            message["content"] = _clean_content(message["content"])
        if message["role"] == "tool":
            limit = limits.get(str(message.get("tool_call_id")), max_tool_result_chars)
            message["content"] = _truncate_content(message.get("content"), limit)
        builder.add(message)
    messages = builder.finish()
    if last_tool_note and messages and messages[-1]["role"] == "tool":
        noted = copy.copy(messages[-1])
        content = noted.get("content")
        noted["content"] = (
            [*_as_parts(content), {"type": "text", "text": last_tool_note}]
            if isinstance(content, list)  # a result with images: the note is one more part
            else f"{content or ''}\n\n{last_tool_note}"
        )
        messages[-1] = noted
    if closing_user_note:
        if messages and messages[-1]["role"] == "user":
            asked = copy.copy(messages[-1])
            asked["content"] = _merge_content(asked.get("content"), closing_user_note)
            messages[-1] = asked
        else:
            messages.append({"role": "user", "content": closing_user_note})
    if system_prompt:
        messages.insert(0, {"role": "system", "content": clean_text(system_prompt)})
    return messages
