"""SQL implementations of the agent-level tools' storage seams (:mod:`hermes_core.stores`)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

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
    and the next session's snapshot must see it. Snapshots — one per new session, on the
    path to a request's first byte — come from a cache that this store's own saves update and
    that expires after ``snapshot_ttl`` seconds (what another replica wrote shows by then).
    """

    def __init__(self, db: Database, *, snapshot_ttl: float = 2.0, max_cached: int = 4096) -> None:
        self.db = db
        self.snapshot_ttl = snapshot_ttl
        self.max_cached = max_cached
        self._snapshots: OrderedDict[str, tuple[float, dict[MemoryTarget, list[str]]]] = (
            OrderedDict()
        )
        # One read per owner at a time: when a hot owner's snapshot expires, the requests in
        # flight share one read instead of each opening a connection of their own.
        self._loading: dict[str, asyncio.Future[dict[MemoryTarget, list[str]]]] = {}
        self._saves = 0
        """Saves so far: a read that began before a save must not be cached after it."""

    async def snapshot(self, owner: str) -> dict[MemoryTarget, list[str]]:
        now = time.monotonic()
        cached = self._snapshots.get(owner)
        if cached is not None and now - cached[0] < self.snapshot_ttl:
            return _copy(cached[1])
        loading = self._loading.get(owner)
        if loading is None:
            loading = asyncio.ensure_future(self._load_snapshot(owner, now))
            self._loading[owner] = loading
            loading.add_done_callback(lambda done: self._forget_load(owner, done))
        # Shielded: one waiter going away must not cancel the read the others wait for.
        return _copy(await asyncio.shield(loading))

    def _forget_load(self, owner: str, done: asyncio.Future[dict[MemoryTarget, list[str]]]) -> None:
        # Only this read: a save may already have replaced it with a newer one.
        if self._loading.get(owner) is done:
            del self._loading[owner]

    async def _load_snapshot(self, owner: str, now: float) -> dict[MemoryTarget, list[str]]:
        saves = self._saves
        statement = select(MEMORY.c.target, MEMORY.c.entries).where(MEMORY.c.scope == owner)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        loaded: dict[MemoryTarget, list[str]] = {"memory": [], "user": []}
        for row in rows:
            if row.target in loaded:
                loaded[row.target] = [str(entry) for entry in row.entries or []]
        if saves == self._saves:
            self._remember(owner, now, loaded)
        return loaded

    def _remember(self, owner: str, now: float, loaded: dict[MemoryTarget, list[str]]) -> None:
        self._snapshots[owner] = (now, loaded)
        self._snapshots.move_to_end(owner)
        while len(self._snapshots) > self.max_cached:
            self._snapshots.popitem(last=False)

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
        self._saves += 1
        self._snapshots.pop(owner, None)  # the next snapshot reads what was just written
        self._loading.pop(owner, None)  # and does not join a read that began before it


def _copy(snapshot: dict[MemoryTarget, list[str]]) -> dict[MemoryTarget, list[str]]:
    return {target: list(entries) for target, entries in snapshot.items()}


class SqlTodoStore:
    """The task list of each session."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def load(self, session_id: str) -> list[TodoItem]:
        # ``c["items"]``: ``c.items`` is the column collection's own ``items()`` method.
        statement = select(TODOS.c["items"]).where(TODOS.c.session_id == session_id)
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
