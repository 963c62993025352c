"""Idempotency keys: the first POST made with a key claims it; a retry with the same key finds
what the first one did (still running, or its answer) instead of doing the work again.

A claim is one INSERT against the key's primary key ``(owner, key)``, written at once (not
through the write-behind queue): two replicas racing for one key cannot both win, and the
loser reads the winner's row. Rows live 24 hours; :meth:`IdempotencyStore.prune` deletes the
expired ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import IdempotencyKeyRow

KEYS = IdempotencyKeyRow.__table__  # type: ignore[attr-defined]

KeyState = Literal["running", "done"]


@dataclass(frozen=True, slots=True, kw_only=True)
class IdempotencyRecord:
    owner: str
    key: str
    endpoint: str
    fingerprint: str
    state: KeyState
    run_id: str | None
    status_code: int | None
    content_type: str | None
    body: bytes | None
    created_at: float
    expires_at: float


class IdempotencyStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim(
        self, owner: str, key: str, *, endpoint: str, fingerprint: str, now: float, ttl: float
    ) -> IdempotencyRecord | None:
        """Claim ``key`` for a new request: None when it is ours now, else the row that holds
        it (a live one: an expired row is replaced, as if pruned)."""
        values = {
            "owner": owner,
            "key": key,
            "endpoint": endpoint,
            "fingerprint": fingerprint,
            "state": "running",
            "created_at": now,
            "expires_at": now + ttl,
        }
        for _ in range(2):
            try:
                async with self.db.engine.begin() as conn:
                    await conn.execute(insert(KEYS), values)
                return None
            except IntegrityError:
                held = await self.get(owner, key)
                if held is None:
                    continue  # released meanwhile: claim it again
                if held.expires_at > now:
                    return held
                async with self.db.engine.begin() as conn:  # expired, not yet pruned
                    await conn.execute(delete(KEYS).where(_of(owner, key) & _expired(now)))
        held = await self.get(owner, key)
        if held is None:  # raced twice with releases: treat as held by nobody we can show
            raise RuntimeError("idempotency key claim raced")
        return held

    async def get(self, owner: str, key: str) -> IdempotencyRecord | None:
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(select(KEYS).where(_of(owner, key)))).first()
        return None if row is None else _record(row)

    async def started(self, owner: str, key: str, run_id: str) -> None:
        """Note the run the claiming request started (a retry may name it)."""
        async with self.db.engine.begin() as conn:
            await conn.execute(update(KEYS).where(_of(owner, key)).values(run_id=run_id))

    async def finish(
        self, owner: str, key: str, *, status_code: int, content_type: str | None, body: bytes
    ) -> None:
        """Keep the claiming request's whole answer: what every retry gets from now on."""
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(KEYS)
                .where(_of(owner, key))
                .values(state="done", status_code=status_code, content_type=content_type, body=body)
            )

    async def release(self, owner: str, key: str) -> None:
        """Give the key up: the request did no work (a retry does it afresh)."""
        async with self.db.engine.begin() as conn:
            await conn.execute(delete(KEYS).where(_of(owner, key)))

    async def prune(self, now: float) -> int:
        """Delete the expired keys; how many."""
        async with self.db.engine.begin() as conn:
            result = await conn.execute(delete(KEYS).where(KEYS.c.expires_at <= now))
        return int(result.rowcount or 0)


def _of(owner: str, key: str) -> Any:
    return (KEYS.c.owner == owner) & (KEYS.c.key == key)


def _expired(now: float) -> Any:
    return KEYS.c.expires_at <= now


_FIELDS = tuple(column.name for column in KEYS.columns)


def _record(row: Any) -> IdempotencyRecord:
    return IdempotencyRecord(**{name: getattr(row, name) for name in _FIELDS})
