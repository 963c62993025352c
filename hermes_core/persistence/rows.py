"""Messages to rows and back, and the portable upsert."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql import Executable

from hermes_core.messages import Message
from hermes_core.search_text import searchable_text

Source = Literal["client", "agent"]
_COLUMNS = ("role", "content", "tool_calls", "tool_call_id", "reasoning")


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message of a session's transcript and where it came from."""

    message: Message
    source: Source
    """``client``: it arrived in a request. ``agent``: the agent produced it."""
    compacted: bool = False
    """Part of a compression child's compacted rendering of earlier history."""


def message_row(
    session_id: str, position: int, stored: StoredMessage, *, now: float
) -> dict[str, Any]:
    message = stored.message
    extra = {key: value for key, value in message.items() if key not in _COLUMNS}
    return {
        "session_id": session_id,
        "position": position,
        "role": message["role"],
        "content": message.get("content"),
        "tool_calls": message.get("tool_calls"),
        "tool_call_id": message.get("tool_call_id"),
        "reasoning": message.get("reasoning"),
        "extra": extra or None,
        "source": stored.source,
        "compacted": stored.compacted,
        # A compacted copy repeats what its base session already indexes.
        "search_text": "" if stored.compacted else searchable_text(message),
        "created_at": now,
    }


def stored_message(row: Any) -> StoredMessage:
    message: dict[str, Any] = {"role": row.role}
    if row.content is not None or row.role != "assistant":
        message["content"] = row.content
    if row.tool_calls:
        message["tool_calls"] = row.tool_calls
    if row.tool_call_id is not None:
        message["tool_call_id"] = row.tool_call_id
    if row.reasoning is not None:
        message["reasoning"] = row.reasoning
    if row.extra:
        message.update(row.extra)
    return StoredMessage(message=message, source=row.source, compacted=row.compacted)  # type: ignore[arg-type]


def upsert(
    dialect: str, table: Table, values: Iterable[str] | dict[str, Any], *, keys: tuple[str, ...]
) -> Executable:
    """INSERT … ON CONFLICT (keys) DO UPDATE: the same statement on SQLite and PostgreSQL.

    ``values``: the row, built into the statement (for one ``execute``), or only the names of
    its columns, for a statement made once and executed with each row as its parameters."""
    insert = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
    statement = insert.values(values) if isinstance(values, dict) else insert
    changed = {name: statement.excluded[name] for name in values if name not in keys}
    return statement.on_conflict_do_update(index_elements=list(keys), set_=changed)
