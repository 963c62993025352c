"""The agent-level tools: ``todo``, ``memory`` and ``session_search``.

Each factory closes over a store from :mod:`hermes_core.stores` and the identity it acts for
(a session, an owner), so the model can never name another session or owner in its arguments.
Bad arguments come back as an ``Error: …`` string instead of an exception: the model reads
it as the tool result and can correct its next call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, get_args

from hermes_core.messages import Message, text_of
from hermes_core.stores import (
    MemoryStore,
    MemoryTarget,
    SessionSearchStore,
    TodoItem,
    TodoStatus,
    TodoStore,
)
from hermes_core.tools.registry import Tool, ToolContext

ENTRY_SEPARATOR = "\n§\n"
"""Joins memory entries; the character budget counts it too."""
TODO_STATUSES: tuple[TodoStatus, ...] = get_args(TodoStatus)
MEMORY_TARGETS: tuple[MemoryTarget, ...] = get_args(MemoryTarget)
MEMORY_ACTIONS = ("add", "replace", "remove")
SEARCH_MESSAGE_CHARS = 600
"""Each message in a search result is cut to this, so a few hits cannot flood the context."""


def _error(message: str) -> str:
    return f"Error: {message}"


class _Rejected(Exception):
    """Bad arguments found deep in a helper; the handler turns it into an error result."""


# --- todo -------------------------------------------------------------------------------------

TODO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": (
                "The task items to write. Omit to read the current list. With merge=false "
                "this becomes the whole list (an empty array clears it)."
            ),
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "Stable id of the item, e.g. '1'."},
                    "content": {
                        "type": "string",
                        "description": "What to do. Required for new items.",
                    },
                    "status": {
                        "type": "string",
                        "enum": list(TODO_STATUSES),
                        "description": "Defaults to pending for new items.",
                    },
                },
                "required": ["id"],
                "additionalProperties": False,
            },
        },
        "merge": {
            "type": "boolean",
            "default": False,
            "description": (
                "false: replace the list with `todos`. true: update the items whose id "
                "matches (only the fields given) and append the others."
            ),
        },
    },
    "additionalProperties": False,
}

TODO_DESCRIPTION = (
    "Keep a task list for the current session. Call with no arguments to read it. Use it for "
    "work with three or more steps: write the plan, mark one item in_progress while you work "
    "on it (at most one at a time), and mark items completed as soon as they are done. "
    "Returns the full list and counts by status."
)


@dataclass(frozen=True, slots=True)
class _TodoUpdate:
    id: str
    content: str | None
    status: TodoStatus | None


def todo_tool(store: TodoStore, session_id: str) -> Tool:
    """The ``todo`` tool for one session's task list."""

    async def handle(args: dict[str, Any], ctx: ToolContext) -> str:
        merge = args.get("merge", False)
        if not isinstance(merge, bool):
            return _error("merge must be true or false.")
        current = await store.load(session_id)
        if args.get("todos") is None:
            return _todo_report(current)
        updates = _parse_todo_updates(args["todos"])
        if isinstance(updates, str):
            return updates
        items = _merge_todos(current, updates) if merge else _replace_todos(updates)
        if isinstance(items, str):
            return items
        active = [item.id for item in items if item.status == "in_progress"]
        if len(active) > 1:
            return _error(
                f"only one item may be in_progress at a time, but this change would leave "
                f"{len(active)} in progress (ids {', '.join(active)}). Nothing was saved; "
                "set all but one to pending or completed."
            )
        await store.save(session_id, items)
        return _todo_report(items)

    return Tool(
        name="todo",
        description=TODO_DESCRIPTION,
        parameters=TODO_PARAMETERS,
        handler=handle,
        concurrent_safe=False,
        summarize=_summarize_todo,
    )


def _parse_todo_updates(raw: object) -> list[_TodoUpdate] | str:
    if not isinstance(raw, list):
        return _error("todos must be an array of {id, content, status} objects.")
    updates: list[_TodoUpdate] = []
    for position, entry in enumerate(raw, start=1):
        if not isinstance(entry, dict):
            return _error(f"todos item {position} must be an object with id, content, status.")
        item_id = entry.get("id")
        # Models often number their items; an integer id means the same as its string.
        if isinstance(item_id, int) and not isinstance(item_id, bool):
            item_id = str(item_id)
        if not isinstance(item_id, str) or not item_id.strip():
            return _error(f"todos item {position} needs a non-empty string id.")
        content = entry.get("content")
        if content is not None and (not isinstance(content, str) or not content.strip()):
            return _error(f"todos item {item_id!r}: content must be a non-empty string.")
        status = entry.get("status")
        if status is not None and status not in TODO_STATUSES:
            return _error(
                f"todos item {item_id!r}: status must be one of {', '.join(TODO_STATUSES)}."
            )
        updates.append(_TodoUpdate(item_id.strip(), content and content.strip(), status))
    ids = [u.id for u in updates]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        return _error(f"each id may appear once, but {', '.join(duplicates)} repeats.")
    return updates


def _replace_todos(updates: list[_TodoUpdate]) -> list[TodoItem] | str:
    missing = [u.id for u in updates if u.content is None]
    if missing:
        return _error(f"items {', '.join(missing)} need content (replacing the whole list).")
    return [
        TodoItem(id=u.id, content=u.content or "", status=u.status or "pending") for u in updates
    ]


def _merge_todos(current: list[TodoItem], updates: list[_TodoUpdate]) -> list[TodoItem] | str:
    items = {item.id: item for item in current}  # dicts keep order: existing items stay put
    for u in updates:
        old = items.get(u.id)
        if old is None:
            if u.content is None:
                return _error(f"item {u.id!r} is new, so it needs content.")
            items[u.id] = TodoItem(id=u.id, content=u.content, status=u.status or "pending")
        else:
            items[u.id] = TodoItem(
                id=u.id, content=u.content or old.content, status=u.status or old.status
            )
    return list(items.values())


def _todo_report(items: list[TodoItem]) -> str:
    counts = {status: sum(item.status == status for item in items) for status in TODO_STATUSES}
    todos = [{"id": i.id, "content": i.content, "status": i.status} for i in items]
    return json.dumps({"todos": todos, "counts": counts, "total": len(items)}, ensure_ascii=False)


def _summarize_todo(args: dict[str, Any]) -> str:
    todos = args.get("todos")
    if not isinstance(todos, list):
        return "todo read"
    noun = "item" if len(todos) == 1 else "items"
    return f"todo {len(todos)} {noun}" + (" (merge)" if args.get("merge") is True else "")


# --- memory -----------------------------------------------------------------------------------

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

    return Tool(
        name="memory",
        description=MEMORY_DESCRIPTION,
        parameters=MEMORY_PARAMETERS,
        handler=handle,
        concurrent_safe=False,
        summarize=_summarize_memory,
    )


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
    for target, heading, limit in parts:
        entries = await store.load(owner, target)
        if entries:
            body = ENTRY_SEPARATOR.join(entries)
            sections.append(f"{heading} ({_usage(entries)}/{limit} chars)\n{body}")
    return "\n\n".join(sections)


# --- session_search ---------------------------------------------------------------------------

SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": (
                "Words to look for. A session matches when it contains every word "
                "(case-insensitive, whole words), in messages, tool calls or tool results."
            ),
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "default": 3,
            "description": "How many sessions to return, newest first.",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}

SEARCH_DESCRIPTION = (
    "Search your earlier conversations with this user. Use it when the user refers to past "
    "work ('like last time', 'the deploy we fixed') or when an earlier session may hold the "
    "answer. Returns, newest first, each matching session's id, title, a snippet around the "
    "match and the messages around it."
)


def session_search_tool(store: SessionSearchStore, owner: str) -> Tool:
    """The ``session_search`` tool over one owner's past sessions."""

    async def handle(args: dict[str, Any], ctx: ToolContext) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            return _error("query must be a non-empty string of words to search for.")
        limit = args.get("limit", 3)
        if isinstance(limit, bool) or not isinstance(limit, int):
            return _error("limit must be an integer from 1 to 10.")
        hits = await store.search(owner, query.strip(), limit=min(max(limit, 1), 10))
        if not hits:
            return f"No sessions matched {query.strip()!r}. Try fewer or different words."
        results = [
            {
                "session_id": hit.session_id,
                "title": hit.title,
                "snippet": hit.snippet,
                "messages": [_render_message(m) for m in hit.messages],
            }
            for hit in hits
        ]
        return json.dumps(results, ensure_ascii=False)

    return Tool(
        name="session_search",
        description=SEARCH_DESCRIPTION,
        parameters=SEARCH_PARAMETERS,
        handler=handle,
        concurrent_safe=True,
        summarize=_summarize_search,
    )


def _render_message(message: Message) -> dict[str, str]:
    # Tool calls are folded into the text: a match may sit in their arguments, and the
    # model should see it there.
    parts = [text_of(message.get("content"))]
    for call in message.get("tool_calls", []):
        function = call.get("function", {})
        parts.append(f"[called {function.get('name', '?')}({function.get('arguments', '')})]")
    content = "\n".join(part for part in parts if part)
    if len(content) > SEARCH_MESSAGE_CHARS:
        content = content[:SEARCH_MESSAGE_CHARS] + "…"
    return {"role": message["role"], "content": content}


def _summarize_search(args: dict[str, Any]) -> str:
    query = args.get("query")
    return f"session_search '{query[:60]}'" if isinstance(query, str) else "session_search"
