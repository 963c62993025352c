"""The summary text of a compression: the summariser's prompt, its input, and the fallback digest.

:mod:`hermes_core.context.compression` decides *what* to summarise; this module turns those
messages into text — the auxiliary model's prompt with the messages as labelled material
(:func:`summariser_prompt`), a deterministic digest when that model is unavailable
(:func:`fallback_summary`) — and wraps the result into the user message that replaces them
(:func:`summary_message`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence

from hermes_core.messages import Message, text_of

SUMMARY_MARKER = "[CONTEXT SUMMARY — earlier conversation, for reference only]"
"""Opens every summary message, so that a later compression recognises an earlier summary."""
_SUMMARY_NOTE = (
    "Part of this conversation was condensed into the summary below to save context space. "
    "It is background, not a new request: continue from the messages that follow it."
)
_SUMMARY_INSTRUCTIONS = """\
You condense the middle part of a conversation between a user and an AI agent that uses tools,
so that the agent can carry on without the original messages. Write a compact, factual summary
in Markdown with exactly these sections:

## Task so far
## Decisions and findings
## Work in progress
## Open questions / next steps

Keep the concrete details the agent will need again: file paths, identifiers, commands, numbers,
error messages and the user's stated preferences. If the material contains an earlier summary,
fold it into yours. Do not answer the user, do not continue the conversation and do not invent
anything. Stay under about {budget} tokens."""
"""The summariser's system prompt; ``{budget}`` is the summary's budget in tokens."""


def _clip(text: str, limit: int) -> str:
    """``text`` on one line (whitespace collapsed), cut to at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _call_names(messages: Iterable[Message]) -> dict[str, str]:
    """Tool call id → ``name(arguments)``, for labelling tool results."""
    return {
        call["id"]: f"{call['function']['name']}({_clip(call['function']['arguments'], 80)})"
        for message in messages
        for call in message.get("tool_calls") or ()
    }


def fallback_summary(middle: Sequence[Message], *, max_chars: int) -> str:
    """A summary built without a model: requests, tool calls with results, last notes."""
    calls = _call_names(middle)
    earlier: list[str] = []
    requests: list[str] = []
    tools: list[str] = []
    notes: list[str] = []
    for message in middle:
        text = text_of(message.get("content")).strip()
        if message["role"] == "user" and text.startswith(SUMMARY_MARKER):
            earlier.append(_clip(text.removeprefix(SUMMARY_MARKER), 1500))
        elif message["role"] == "user" and text:
            requests.append(_clip(text, 300))
        elif message["role"] == "assistant" and text:
            notes.append(_clip(text, 300))
        elif message["role"] == "tool":
            label = calls.get(str(message.get("tool_call_id")), "a tool")
            first_line = next((line for line in text.splitlines() if line.strip()), "(empty)")
            tools.append(f"{label} → {_clip(first_line, 160)}")
    sections = [
        f"(The summariser was unavailable: this is a mechanical digest of {len(middle)} "
        "earlier messages.)"
    ]
    for title, items, keep in (
        ("Earlier summary", earlier, 1),
        ("User requests", requests, 10),
        ("Tool calls and results", tools, 20),
        ("Last assistant notes", notes, 5),
    ):
        if items:
            lines = "\n".join(f"- {item}" for item in items[-keep:])
            skipped = f"\n- (and {len(items) - keep} earlier)" if len(items) > keep else ""
            sections.append(f"## {title}\n{lines}{skipped}")
    return clip_block("\n\n".join(sections), max_chars)


def clip_block(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, its line breaks kept."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


def serialise_for_summary(middle: Sequence[Message], *, max_chars: int, per_message: int) -> str:
    """The middle as plain labelled text, each message cut so the whole stays near max_chars."""
    calls = _call_names(middle)
    limit = max(200, min(per_message, max_chars // max(len(middle), 1)))
    lines: list[str] = []
    for message in middle:
        role = message["role"]
        text = clip_block(text_of(message.get("content")).strip(), limit)
        if role == "tool":
            label = calls.get(str(message.get("tool_call_id")), "tool")
            lines.append(f"[tool result of {label}]\n{text}")
            continue
        if text:
            lines.append(f"[{role}]\n{text}")
        for call in message.get("tool_calls") or ():
            lines.append(f"[assistant calls {calls[call['id']]}]")
    return "\n\n".join(lines)


def summariser_prompt(
    middle: Sequence[Message], *, budget: int, max_chars: int, per_message: int
) -> list[Message]:
    """The messages asking the auxiliary model to summarise ``middle`` in about ``budget``
    tokens; the middle is serialised by :func:`serialise_for_summary`."""
    material = serialise_for_summary(middle, max_chars=max_chars, per_message=per_message)
    return [
        {"role": "system", "content": _SUMMARY_INSTRUCTIONS.format(budget=budget)},
        {
            "role": "user",
            "content": f"Conversation to summarise ({len(middle)} messages):\n\n{material}",
        },
    ]


def summary_message(summary: str, tail: Sequence[Message]) -> list[Message]:
    """The summary as one user message, merged into the tail's first message if that is a
    user's, so two user messages never follow each other."""
    text = f"{SUMMARY_MARKER}\n{_SUMMARY_NOTE}\n\n{summary.strip()}"
    if not tail or tail[0]["role"] != "user":
        return [{"role": "user", "content": text}, *tail]
    first = copy.copy(tail[0])
    content = first.get("content")
    if isinstance(content, list):
        first["content"] = [{"type": "text", "text": text}, *content]
    else:
        first["content"] = f"{text}\n\n---\n\n{content or ''}".rstrip()
    return [first, *tail[1:]]
