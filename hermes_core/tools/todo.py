"""The ``todo`` tool: the model's task list for the current session.

The factory closes over a :class:`~hermes_core.stores.TodoStore` and one session id, so the
model can never name another session in its arguments. Bad arguments come back as an
``Error: …`` string instead of an exception: the model reads it as the tool result and can
correct its next call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, get_args

from hermes_core.stores import TodoItem, TodoStatus, TodoStore
from hermes_core.tools.registry import Tool, ToolContext, ToolHandler, unbound

TODO_STATUSES: tuple[TodoStatus, ...] = get_args(TodoStatus)


def _error(message: str) -> str:
    return f"Error: {message}"


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
    return TODO_TOOL.with_handler(_todo_handler(store, session_id))


def _todo_handler(store: TodoStore, session_id: str) -> ToolHandler:

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

    return handle


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


TODO_TOOL = Tool(
    name="todo",
    description=TODO_DESCRIPTION,
    parameters=TODO_PARAMETERS,
    handler=unbound,
    concurrent_safe=False,
    summarize=_summarize_todo,
)
"""The ``todo`` tool without its session: what the model is shown (:func:`todo_tool` binds
it to a session's task list)."""
