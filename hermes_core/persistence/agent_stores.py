"""SQL implementations of the agent-level tools' storage seams (:mod:`hermes_core.stores`)."""

from __future__ import annotations

import time

from sqlalchemy import select

from hermes_core.persistence.database import Database
from hermes_core.persistence.rows import upsert
from hermes_core.persistence.tables import MemoryRow, TodoRow
from hermes_core.stores import MemoryTarget, TodoItem

MEMORY = MemoryRow.__table__  # type: ignore[attr-defined]
TODOS = TodoRow.__table__  # type: ignore[attr-defined]


class SqlMemoryStore:
    """Memory entries per owner (or ``owner/scope``) and target.

    Saves are written at once, not queued: the memory tool tells the model a write is kept,
    and the next session's snapshot must see it.
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    async def load(self, owner: str, target: MemoryTarget) -> list[str]:
        statement = select(MEMORY.c.entries).where(
            MEMORY.c.scope == owner, MEMORY.c.target == target
        )
        async with self.db.engine.connect() as conn:
            entries = (await conn.execute(statement)).scalar()
        return [str(entry) for entry in entries or []]

    async def save(self, owner: str, target: MemoryTarget, entries: list[str]) -> None:
        values = {
            "scope": owner,
            "target": target,
            "entries": list(entries),
            "updated_at": time.time(),
        }
        async with self.db.engine.begin() as conn:
            await conn.execute(upsert(self.db.dialect, MEMORY, values, keys=("scope", "target")))


class SqlTodoStore:
    """The task list of each session."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def load(self, session_id: str) -> list[TodoItem]:
        statement = select(TODOS.c.items).where(TODOS.c.session_id == session_id)
        async with self.db.engine.connect() as conn:
            items = (await conn.execute(statement)).scalar()
        return [
            TodoItem(id=item["id"], content=item["content"], status=item["status"])
            for item in items or []
        ]

    async def save(self, session_id: str, items: list[TodoItem]) -> None:
        values = {
            "session_id": session_id,
            "items": [{"id": i.id, "content": i.content, "status": i.status} for i in items],
            "updated_at": time.time(),
        }
        async with self.db.engine.begin() as conn:
            await conn.execute(upsert(self.db.dialect, TODOS, values, keys=("session_id",)))
