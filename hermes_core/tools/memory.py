"""The ``memory`` tool: durable notes and a profile of the user, kept per owner.

Two stores (``memory``, ``user``) with fixed character budgets; :func:`memory_snapshot` renders
both for the system prompt. The factory closes over a :class:`~hermes_core.stores.MemoryStore`
and one owner, so the model can never name another owner in its arguments. Bad arguments come
back as an ``Error: …`` string instead of an exception: the model reads it as the tool result
and can correct its next call.
"""

from __future__ import annotations

from typing import Any, get_args

from hermes_core.stores import MemoryStore, MemoryTarget
from hermes_core.tools.registry import Tool, ToolContext, ToolHandler, unbound

ENTRY_SEPARATOR = "\n§\n"
"""Joins memory entries; the character budget counts it too."""
MEMORY_TARGETS: tuple[MemoryTarget, ...] = get_args(MemoryTarget)
MEMORY_ACTIONS = ("add", "replace", "remove")


def _error(message: str) -> str:
    return f"Error: {message}"


class _Rejected(Exception):
    """Bad arguments found deep in a helper; the handler turns it into an error result."""


MEMORY_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": list(MEMORY_ACTIONS),
            "description": (
                "add: store `content` as a new entry. replace: swap the entry containing "
                "`old_text` for `content`. remove: delete the entry containing `old_text`."
            ),
        },
        "target": {
            "type": "string",
            "enum": list(MEMORY_TARGETS),
            "description": (
                "memory: your own notes (environment facts, conventions, lessons learned). "
                "user: what you know about the user (name, role, preferences)."
            ),
        },
        "content": {
            "type": "string",
            "description": "The entry text, for add and replace. Keep it short and factual.",
        },
        "old_text": {
            "type": "string",
            "description": (
                "For replace and remove: a piece of text found in exactly one existing entry."
            ),
        },
    },
    "required": ["action", "target"],
    "additionalProperties": False,
}

MEMORY_DESCRIPTION = (
    "Save durable facts that should outlive this conversation. Two stores with fixed "
    "character budgets: `memory` (your notes) and `user` (the user's profile). Save what "
    "will matter in future sessions (preferences, corrections, stable facts about the "
    "environment), not task progress. When a store is full, replace or remove an entry "
    "first. Changes are saved at once but appear in your system prompt from the next session."
)


def memory_tool(
    store: MemoryStore, owner: str, *, memory_limit: int = 2200, user_limit: int = 1375
) -> Tool:
    """The ``memory`` tool for one owner's notes and user profile."""
    return MEMORY_TOOL.with_handler(_memory_handler(store, owner, memory_limit, user_limit))


def _memory_handler(
    store: MemoryStore, owner: str, memory_limit: int, user_limit: int
) -> ToolHandler:
    limits: dict[MemoryTarget, int] = {"memory": memory_limit, "user": user_limit}

    async def handle(args: dict[str, Any], ctx: ToolContext) -> str:
        action, target = args.get("action"), args.get("target")
        if action not in MEMORY_ACTIONS:
            return _error(f"action must be one of {', '.join(MEMORY_ACTIONS)}.")
        if target not in MEMORY_TARGETS:
            return _error(f"target must be one of {', '.join(MEMORY_TARGETS)}.")
        content, old_text = args.get("content"), args.get("old_text")
        for name, value in (("content", content), ("old_text", old_text)):
            if value is not None and not isinstance(value, str):
                return _error(f"{name} must be a string.")
        entries = await store.load(owner, target)
        try:
            if action == "add":
                new_entries, what = _add_entry(entries, target, content)
            elif action == "replace":
                new_entries, what = _replace_entry(entries, target, old_text, content)
            else:
                new_entries, what = _remove_entry(entries, target, old_text)
        except _Rejected as exc:
            return _error(str(exc))
        limit, before, after = limits[target], _usage(entries), _usage(new_entries)
        # Shrinking is always allowed, so a store left over a lowered limit can be repaired.
        if after > limit and after > before:
            return _error(
                f"the {target} store is full: this {action} would bring it to {after}/{limit} "
                f"chars (now {before}/{limit} chars). Nothing was saved. Replace or remove "
                f"an entry to make room. Current entries:\n{_numbered(entries)}"
            )
        if new_entries != entries:
            await store.save(owner, target, new_entries)
        count = f"{len(new_entries)} {'entry' if len(new_entries) == 1 else 'entries'}"
        return f"{what} Usage: {after}/{limit} chars, {count}."

    return handle


_Change = tuple[list[str], str]
"""The new entries and a sentence saying what changed."""


def _add_entry(entries: list[str], target: str, content: str | None) -> _Change:
    text = _check_content(content)
    if text in entries:
        return list(entries), f"Already stored in {target}; nothing changed."
    return [*entries, text], f"Added to {target}: {text!r}."


def _replace_entry(
    entries: list[str], target: str, old_text: str | None, content: str | None
) -> _Change:
    index = _find_entry(entries, target, old_text)
    text = _check_content(content)
    new_entries = [*entries[:index], text, *entries[index + 1 :]]
    return new_entries, f"Replaced in {target}: {entries[index]!r} → {text!r}."


def _remove_entry(entries: list[str], target: str, old_text: str | None) -> _Change:
    index = _find_entry(entries, target, old_text)
    return [*entries[:index], *entries[index + 1 :]], f"Removed from {target}: {entries[index]!r}."


def _check_content(content: str | None) -> str:
    if content is None or not content.strip():
        raise _Rejected("content is required for add and replace: the text of the entry.")
    if any(line.strip() == ENTRY_SEPARATOR.strip() for line in content.splitlines()):
        raise _Rejected("content may not contain a line holding only '§' (it separates entries).")
    return content.strip()


def _find_entry(entries: list[str], target: str, old_text: str | None) -> int:
    """Index of the single entry containing ``old_text``."""
    if old_text is None or not old_text.strip():
        raise _Rejected("old_text is required for replace and remove: text from one entry.")
    matches = [i for i, entry in enumerate(entries) if old_text.strip() in entry]
    if not matches:
        listing = _numbered(entries) if entries else "(none)"
        raise _Rejected(f"no entry in {target} contains {old_text!r}. Current entries:\n{listing}")
    # Identical duplicates are one fact stored twice, not an ambiguity: act on the first.
    if len({entries[i] for i in matches}) > 1:
        found = _numbered([entries[i] for i in matches])
        raise _Rejected(
            f"{old_text!r} matches {len(matches)} entries in {target}; give old_text that "
            f"appears in only one of them:\n{found}"
        )
    return matches[0]


def _usage(entries: list[str]) -> int:
    return len(ENTRY_SEPARATOR.join(entries))


def _numbered(entries: list[str]) -> str:
    return "\n".join(f"{n}. {entry}" for n, entry in enumerate(entries, start=1))


def _summarize_memory(args: dict[str, Any]) -> str:
    action, target = args.get("action"), args.get("target")
    if isinstance(action, str) and isinstance(target, str):
        return f"memory {action} → {target}"
    return "memory"


MEMORY_TOOL = Tool(
    name="memory",
    description=MEMORY_DESCRIPTION,
    parameters=MEMORY_PARAMETERS,
    handler=unbound,
    concurrent_safe=False,
    summarize=_summarize_memory,
)
"""The ``memory`` tool without its owner: what the model is shown (:func:`memory_tool` binds
it to an owner's stores)."""


async def memory_snapshot(
    store: MemoryStore, owner: str, *, memory_limit: int = 2200, user_limit: int = 1375
) -> str:
    """Both memory stores as a block for the system prompt; empty when both are empty.

    The agent takes this once at session start and keeps it frozen, so writes during the
    session do not change the prompt prefix (and its cache).
    """
    parts: list[tuple[MemoryTarget, str, int]] = [
        ("memory", "## Your notes", memory_limit),
        ("user", "## About the user", user_limit),
    ]
    sections = []
    loaded = await store.snapshot(owner)
    for target, heading, limit in parts:
        entries = loaded.get(target, [])
        if entries:
            body = ENTRY_SEPARATOR.join(entries)
            sections.append(f"{heading} ({_usage(entries)}/{limit} chars)\n{body}")
    return "\n\n".join(sections)
