"""Leases: a job only one replica may do at a time (the retention sweeper), held in the
``leases`` table.

A replica takes a lease by a conditional update — it moves the row only when its lease has
run out (or is already its own) — and by an insert when the row does not exist yet, which the
primary key lets only one replica win. It renews the lease while it works, so a replica that
dies mid-job loses it once its time runs out, and another takes the job over. Nothing here is
engine-specific: the same statements hold on SQLite and PostgreSQL.
"""

from __future__ import annotations

import time

from sqlalchemy import delete, insert, or_, update
from sqlalchemy.exc import IntegrityError

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import LeaseRow

LEASES = LeaseRow.__table__  # type: ignore[attr-defined]


class LeaseStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def take(self, name: str, holder: str, *, seconds: float) -> bool:
        """Hold the lease ``name`` for ``seconds`` as ``holder``, unless another holder's has
        not run out; whether ``holder`` holds it now."""
        now = time.time()
        moved = (
            update(LEASES)
            .where(
                LEASES.c.name == name,
                or_(LEASES.c.lease_until < now, LEASES.c.holder == holder),
            )
            .values(holder=holder, lease_until=now + seconds)
        )
        async with self.db.engine.begin() as conn:
            if (await conn.execute(moved)).rowcount:
                return True
        try:  # no row yet, or another's live one: the insert tells them apart
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    insert(LEASES).values(name=name, holder=holder, lease_until=now + seconds)
                )
        except IntegrityError:
            return False
        return True

    async def renew(self, name: str, holder: str, *, seconds: float) -> bool:
        """Extend ``holder``'s lease; False when it is no longer ``holder``'s (it ran out and
        another replica took it): the work it guarded must stop."""
        statement = (
            update(LEASES)
            .where(LEASES.c.name == name, LEASES.c.holder == holder)
            .values(lease_until=time.time() + seconds)
        )
        async with self.db.engine.begin() as conn:
            return bool((await conn.execute(statement)).rowcount)

    async def release(self, name: str, holder: str) -> None:
        """Give the lease up (another replica may take it at once); nothing if it is not
        ``holder``'s any more."""
        statement = delete(LEASES).where(LEASES.c.name == name, LEASES.c.holder == holder)
        async with self.db.engine.begin() as conn:
            await conn.execute(statement)
