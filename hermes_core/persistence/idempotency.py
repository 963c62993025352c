"""Idempotency keys: the first POST made with a key claims it; a retry with the same key finds
what the first one did (still running, or its answer) instead of doing the work again.

A claim is one INSERT against the key's primary key ``(owner, key)``, written at once (not
through the write-behind queue): two replicas racing for one key cannot both win, and the
loser reads the winner's row. Rows live 24 hours; :meth:`IdempotencyStore.prune` deletes the
expired ones.

A claim names its holder: the replica (``instance``), which start of it (``life``), and a lease
(``claimed_until``) the holder renews while it answers. A holder that died stops renewing, and a
retry may then take the claim over (:meth:`IdempotencyStore.take_over`); the holder's own writes
name its ``life``, so one that was only frozen and wakes up writes over nothing it lost.
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
    headers: str | None
    created_at: float
    expires_at: float
    instance: str | None
    life: str | None
    claimed_until: float | None


class IdempotencyStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim(
        self,
        owner: str,
        key: str,
        *,
        endpoint: str,
        fingerprint: str,
        now: float,
        ttl: float,
        holder: Holder | None = None,
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
            **(holder.values(now) if holder is not None else {}),
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

    async def started(self, owner: str, key: str, run_id: str, *, life: str | None = None) -> bool:
        """Note the run the claiming request starts (a retry may name it); with ``life``,
        only while the claim is that start's. False when it is not (any more): a retry took
        the claim over."""
        statement = update(KEYS).where(_held_by(owner, key, life)).values(run_id=run_id)
        async with self.db.engine.begin() as conn:
            return bool((await conn.execute(statement)).rowcount)

    async def renew(self, owner: str, key: str, holder: Holder, *, now: float) -> bool:
        """Push the claim's lease on; False when it is no longer ``holder``'s (answered, or
        taken over by a retry that found its lease run out)."""
        statement = (
            update(KEYS)
            .where(_held_by(owner, key, holder.life), KEYS.c.state == "running")
            .values(claimed_until=now + holder.lease_seconds)
        )
        async with self.db.engine.begin() as conn:
            return bool((await conn.execute(statement)).rowcount)

    async def take_over(self, dead: IdempotencyRecord, holder: Holder, *, now: float) -> bool:
        """Make ``dead``'s claim (a running one that started no run, whose holder died)
        ``holder``'s; False when something changed it meanwhile (another retry took it, or
        its holder was alive after all and wrote to it)."""
        statement = (
            update(KEYS)
            .where(
                _held_by(dead.owner, dead.key, dead.life),
                KEYS.c.state == "running",
                KEYS.c.run_id.is_(None),
                _same(KEYS.c.claimed_until, dead.claimed_until),
            )
            .values(**holder.values(now))
        )
        async with self.db.engine.begin() as conn:
            return bool((await conn.execute(statement)).rowcount)

    async def finish(
        self,
        owner: str,
        key: str,
        *,
        status_code: int,
        content_type: str | None,
        body: bytes,
        headers: str | None = None,
        life: str | None = None,
    ) -> None:
        """Keep the claiming request's whole answer: what every retry gets from now on. With
        ``life``, only while the claim is that start's and unanswered."""
        where = _of(owner, key) if life is None else _held_by(owner, key, life)
        if life is not None:
            where = where & (KEYS.c.state == "running")
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(KEYS)
                .where(where)
                .values(
                    state="done",
                    status_code=status_code,
                    content_type=content_type,
                    body=body,
                    headers=headers,
                )
            )

    async def release(self, owner: str, key: str, *, life: str | None = None) -> None:
        """Give the key up: the request did no work (a retry does it afresh). With ``life``,
        only while the claim is that start's (not once a retry took it over)."""
        async with self.db.engine.begin() as conn:
            await conn.execute(delete(KEYS).where(_held_by(owner, key, life)))

    async def prune(self, now: float) -> int:
        """Delete the expired keys; how many."""
        async with self.db.engine.begin() as conn:
            result = await conn.execute(delete(KEYS).where(KEYS.c.expires_at <= now))
        return int(result.rowcount or 0)


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a claim: a replica (``instance``), one start of it (``life``), and how long
    its lease on a claim runs unless renewed."""

    instance: str | None
    life: str
    lease_seconds: float

    def values(self, now: float) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "life": self.life,
            "claimed_until": now + self.lease_seconds,
        }


def _of(owner: str, key: str) -> Any:
    return (KEYS.c.owner == owner) & (KEYS.c.key == key)


def _held_by(owner: str, key: str, life: str | None) -> Any:
    """The key's row; with ``life``, only while that start holds it."""
    return _of(owner, key) if life is None else _of(owner, key) & (KEYS.c.life == life)


def _same(column: Any, value: object) -> Any:
    return column.is_(None) if value is None else column == value


def _expired(now: float) -> Any:
    return KEYS.c.expires_at <= now


_FIELDS = tuple(column.name for column in KEYS.columns)


def _record(row: Any) -> IdempotencyRecord:
    return IdempotencyRecord(**{name: getattr(row, name) for name in _FIELDS})
