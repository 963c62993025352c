"""Prompt-cache breakpoints on the wire: where Anthropic ``cache_control`` markers go.

The layout is "system and last 3": one breakpoint on the system prompt and one on each of the
last three non-system messages that can carry one — never more than four, the API's limit.
Why it pays off in a tool loop: each call appends an assistant turn and a turn of tool
results; the breakpoint on the newest message writes the whole prompt to the cache, and on the
next call that message is third from the end, still a breakpoint, so everything up to it is
read back and only the new turns are written. The system breakpoint keeps the long, frozen
instructions warm on their own, e.g. across a compression that rewrites the messages.

- :func:`mark_anthropic_body` / :func:`system_and_last_3` place breakpoints on an Anthropic
  Messages request body (the adapter's :data:`CacheMarkers` hook);
- :func:`mark_chat_messages` does the same on a Chat Completions message list, for Claude models
  behind OpenAI-wire gateways (OpenRouter-style) that read ``cache_control`` on content parts.

Whether a call gets breakpoints at all is the context's decision
(:mod:`hermes_core.context.caching`); these functions only place them. None of them mutate
their input: the transcript is the record, markers are request-local.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from hermes_core.providers._anthropic_convert import CacheMarkers

CacheTTL = Literal["5m", "1h"]

MAX_BREAKPOINTS = 4
"""Anthropic rejects a request with more ``cache_control`` blocks than this (400)."""
MESSAGE_BREAKPOINTS = 3
"""Breakpoints on the newest messages; the fourth goes to the system prompt."""

# Thinking blocks are replayed verbatim and the API refuses cache_control on them.
_UNMARKABLE_BLOCKS = frozenset({"thinking", "redacted_thinking"})

Block = dict[str, Any]


def cache_marker(ttl: CacheTTL = "5m") -> dict[str, str]:
    """A ``cache_control`` value. 5m is the API's default, so it is left implicit: gateways that
    predate the ``ttl`` field accept the marker unchanged."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


# --- Anthropic Messages body ------------------------------------------------------------------


def system_and_last_3(ttl: CacheTTL = "5m") -> CacheMarkers:
    """The "system and last 3" layout as the Anthropic adapter's :data:`CacheMarkers` hook."""

    def place(body: dict[str, Any]) -> dict[str, Any]:
        return mark_anthropic_body(body, ttl=ttl)

    return place


def mark_anthropic_body(body: Mapping[str, Any], *, ttl: CacheTTL = "5m") -> dict[str, Any]:
    """``body`` with breakpoints on its last system block and on the last eligible block of
    each of its last three messages that has one.

    Markers already on system or message blocks are replaced by this layout; markers on tools
    and a top-level (automatic) ``cache_control`` are kept and count against the limit of four,
    the system prompt first, then the newest messages.
    """
    marker = cache_marker(ttl)
    marked = dict(body)
    budget = MAX_BREAKPOINTS - _fixed_anthropic_markers(body)
    system = body.get("system")
    if system is not None:
        system = _strip_blocks(system)
        with_marker = _mark_last_block(system, marker) if budget > 0 else None
        if with_marker is not None:
            system = with_marker
            budget -= 1
        marked["system"] = system
    messages = [_strip_message(message) for message in body.get("messages") or []]
    wanted = min(MESSAGE_BREAKPOINTS, budget)
    placed = 0
    for index in range(len(messages) - 1, -1, -1):
        if placed >= wanted:
            break
        content = _mark_last_block(messages[index].get("content"), marker)
        if content is not None:
            messages[index]["content"] = content
            placed += 1
    marked["messages"] = messages
    return marked


def _fixed_anthropic_markers(body: Mapping[str, Any]) -> int:
    tools = body.get("tools") or []
    on_tools = sum(1 for tool in tools if isinstance(tool, Mapping) and "cache_control" in tool)
    return on_tools + (1 if isinstance(body.get("cache_control"), Mapping) else 0)


def _strip_message(message: Mapping[str, Any]) -> dict[str, Any]:
    copied = dict(message)
    if "content" in copied:
        copied["content"] = _strip_blocks(copied["content"])
    return copied


def _strip_blocks(content: Any) -> Any:
    """Content without ``cache_control`` on its blocks (a new list only when one had it)."""
    if not isinstance(content, list) or not any(
        isinstance(block, Mapping) and "cache_control" in block for block in content
    ):
        return content
    return [
        {k: v for k, v in block.items() if k != "cache_control"}
        if isinstance(block, Mapping)
        else block
        for block in content
    ]


def _can_carry_marker(block: Any) -> bool:
    if not isinstance(block, Mapping) or block.get("type") in _UNMARKABLE_BLOCKS:
        return False
    # The API refuses cache_control on an empty text block.
    return block.get("type") != "text" or bool(block.get("text"))


def _mark_last_block(content: Any, marker: Mapping[str, str]) -> list[Block] | None:
    """Content (a string or blocks) with ``marker`` on its last block that can carry one;
    None when none can. A string becomes one text block, the only shape with a marker slot."""
    if isinstance(content, str):
        return (
            [{"type": "text", "text": content, "cache_control": dict(marker)}] if content else None
        )
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        if _can_carry_marker(content[index]):
            blocks = list(content)
            blocks[index] = {**content[index], "cache_control": dict(marker)}
            return blocks
    return None


# --- Chat Completions messages (Claude behind an OpenAI-wire gateway) ------------------------


def mark_chat_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    ttl: CacheTTL = "5m",
    mark_tool_messages: bool = True,
) -> list[dict[str, Any]]:
    """Chat Completions ``messages`` with the "system and last 3" layout on content parts.

    Gateways in front of Anthropic (OpenRouter-style) read ``cache_control`` only on content
    parts, so a marked string becomes ``[{"type": "text", "text": ..., "cache_control": ...}]``,
    and a message without text (an assistant turn with only tool calls) cannot carry one and
    is passed over for the one before it. Tool messages take a text-parts list too (the Chat
    Completions API allows it for ``role: tool``) and such gateways move the marker onto the
    ``tool_result`` block; ``mark_tool_messages=False`` passes them over, for proxies that
    copy parts verbatim into ``tool_result.content`` (where Anthropic rejects a marker).

    Markers already present (a client's own, message- or part-level) are removed first, so the
    count never exceeds four.
    """
    marker = cache_marker(ttl)
    marked = [_strip_chat_message(message) for message in messages]
    budget = MAX_BREAKPOINTS
    leading = 0
    while leading < len(marked) and marked[leading].get("role") == "system":
        leading += 1
    if leading:
        # The last of the leading system messages closes the system prefix.
        system = marked[leading - 1]
        parts = _mark_last_text_part(system.get("content"), marker)
        if parts is not None:
            system["content"] = parts
            budget -= 1
    wanted = min(MESSAGE_BREAKPOINTS, budget)
    placed = 0
    for index in range(len(marked) - 1, leading - 1, -1):
        if placed >= wanted:
            break
        message = marked[index]
        role = message.get("role")
        if role == "system" or (role == "tool" and not mark_tool_messages):
            continue
        parts = _mark_last_text_part(message.get("content"), marker)
        if parts is not None:
            message["content"] = parts
            placed += 1
    return marked


def _strip_chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    copied = {k: v for k, v in message.items() if k != "cache_control"}
    if "content" in copied:
        copied["content"] = _strip_blocks(copied["content"])
    return copied


def _mark_last_text_part(content: Any, marker: Mapping[str, str]) -> list[Block] | None:
    # Only text parts: they are what the gateways document as carrying cache_control.
    if isinstance(content, str):
        return (
            [{"type": "text", "text": content, "cache_control": dict(marker)}] if content else None
        )
    if not isinstance(content, list):
        return None
    for index in range(len(content) - 1, -1, -1):
        part = content[index]
        if isinstance(part, Mapping) and part.get("type") == "text" and part.get("text"):
            parts = list(content)
            parts[index] = {**part, "cache_control": dict(marker)}
            return parts
    return None
