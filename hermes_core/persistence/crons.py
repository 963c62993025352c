"""Schedules (``/v1/crons``) and their firings.

A firing is claimed once across replicas by one transaction that advances the cron's
``next_fire_at`` with a conditional UPDATE (only from the value the replica read) and inserts
the firing, whose ``(cron_id, scheduled_at)`` is unique: a replica that lost the race updates
no row (or hits the constraint) and fires nothing. The firing holds a lease until its run's id
is recorded; a replica that died in between leaves a claim that another retakes once the lease
ran out, while a firing with a run is never fired again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from hermes_core.persistence.database import Database
from hermes_core.persistence.keyset import newest_first
from hermes_core.persistence.tables import CronFiringRow, CronRow

CRONS = CronRow.__table__  # type: ignore[attr-defined]
FIRINGS = CronFiringRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class Cron:
    id: str
    owner: str
    schedule: str
    timezone: str
    model: str
    body: dict[str, Any]
    """What each firing starts a run with (``input``, ``session``, ``metadata``, …)."""
    paused: bool
    next_fire_at: float | None
    created_at: float
    updated_at: float


_CRON_FIELDS = tuple(f for f in Cron.__dataclass_fields__)


def _cron(row: Any) -> Cron:
    values = {name: getattr(row, name) for name in _CRON_FIELDS}
    values["body"] = dict(values["body"])
    values["paused"] = bool(values["paused"])
    return Cron(**values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Firing:
    id: str
    cron_id: str
    owner: str
    scheduled_at: float
    status: str
    claimed_by: str | None
    claimed_until: float | None
    run_id: str | None
    """The run it started (or, ``steered``, joined); None once retention deleted that run."""
    error: str | None
    error_code: str | None
    created_at: float


_FIRING_FIELDS = tuple(f for f in Firing.__dataclass_fields__)


def _firing(row: Any) -> Firing:
    return Firing(**{name: getattr(row, name) for name in _FIRING_FIELDS})


class CronStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- the schedules ------------------------------------------------------------------------

    async def add(self, cron: Cron) -> None:
        async with self.db.engine.begin() as conn:
            await conn.execute(insert(CRONS), {name: getattr(cron, name) for name in _CRON_FIELDS})

    async def get(self, owner: str, cron_id: str) -> Cron | None:
        statement = select(CRONS).where(CRONS.c.id == cron_id, CRONS.c.owner == owner)
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _cron(row) if row is not None else None

    async def count(self, owner: str) -> int:
        """How many crons ``owner`` keeps."""
        statement = select(func.count()).select_from(CRONS).where(CRONS.c.owner == owner)
        async with self.db.engine.connect() as conn:
            return int((await conn.execute(statement)).scalar_one())

    async def page(self, owner: str, *, after: str | None, limit: int) -> tuple[list[Cron], bool]:
        """``owner``'s crons, newest first, after the one with id ``after``; and whether
        there are more."""
        where = [CRONS.c.owner == owner]
        rows, more = await newest_first(self.db, CRONS, *where, after=after, limit=limit)
        return [_cron(row) for row in rows], more

    async def change(self, owner: str, cron_id: str, **values: Any) -> Cron | None:
        """Set ``values`` on ``owner``'s cron; the cron as it now is (None: no such cron)."""
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                update(CRONS).where(CRONS.c.id == cron_id, CRONS.c.owner == owner).values(**values)
            )
        if result.rowcount != 1:
            return None
        return await self.get(owner, cron_id)

    async def remove(self, owner: str, cron_id: str) -> bool:
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                delete(CRONS).where(CRONS.c.id == cron_id, CRONS.c.owner == owner)
            )
        return bool(result.rowcount == 1)

    async def earliest(self, limit: int) -> list[Cron]:
        """The active crons that fire first (the scheduler's one query per wake: those due,
        and the time it may sleep until)."""
        statement = (
            select(CRONS)
            .where(CRONS.c.paused.is_(False), CRONS.c.next_fire_at.is_not(None))
            .order_by(CRONS.c.next_fire_at)
            .limit(limit)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_cron(row) for row in rows]

    # --- firings ------------------------------------------------------------------------------

    async def claim(
        self,
        cron: Cron,
        *,
        scheduled_at: float | None,
        next_fire_at: float | None,
        firing_id: str,
        instance: str,
        now: float,
        lease_seconds: float,
    ) -> Firing | None:
        """Advance ``cron`` from the ``next_fire_at`` it was read with to ``next_fire_at``
        and, unless ``scheduled_at`` is None (times skipped, nothing fired), claim its firing
        at ``scheduled_at`` for ``instance``: the firing, or None when another replica got
        there first (or the cron changed meanwhile)."""
        firing = Firing(
            id=firing_id,
            cron_id=cron.id,
            owner=cron.owner,
            scheduled_at=scheduled_at or 0.0,
            status="claimed",
            claimed_by=instance,
            claimed_until=now + lease_seconds,
            run_id=None,
            error=None,
            error_code=None,
            created_at=now,
        )
        try:
            async with self.db.engine.begin() as conn:
                moved = await conn.execute(
                    update(CRONS)
                    .where(
                        CRONS.c.id == cron.id,
                        CRONS.c.next_fire_at == cron.next_fire_at,
                        CRONS.c.paused.is_(False),
                    )
                    .values(next_fire_at=next_fire_at)
                )
                if moved.rowcount != 1:
                    await conn.rollback()
                    return None
                if scheduled_at is None:
                    return None
                await conn.execute(
                    insert(FIRINGS), {name: getattr(firing, name) for name in _FIRING_FIELDS}
                )
        except IntegrityError:  # that time was fired already (the unique constraint)
            return None
        return firing

    async def retake(
        self, instance: str, *, now: float, lease_seconds: float, limit: int = 10
    ) -> list[Firing]:
        """Claims whose replica died before starting their run (the lease ran out with no
        run id): taken over by ``instance``, each by one replica only."""
        lapsed = and_(
            FIRINGS.c.status == "claimed",
            FIRINGS.c.run_id.is_(None),
            FIRINGS.c.claimed_until < now,
        )
        async with self.db.engine.connect() as conn:
            candidates = (await conn.execute(select(FIRINGS.c.id).where(lapsed).limit(limit))).all()
        taken: list[str] = []
        for (firing_id,) in candidates:
            async with self.db.engine.begin() as conn:
                result = await conn.execute(
                    update(FIRINGS)
                    .where(FIRINGS.c.id == firing_id, lapsed)
                    .values(claimed_by=instance, claimed_until=now + lease_seconds)
                )
            if result.rowcount == 1:
                taken.append(firing_id)
        if not taken:
            return []
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(select(FIRINGS).where(FIRINGS.c.id.in_(taken)))).all()
        return [_firing(row) for row in rows]

    async def renew(self, firing_id: str, instance: str, *, until: float) -> bool:
        """Hold ``instance``'s claim on a firing whose run is still starting (waiting for its
        session) until ``until``; False when the claim is no longer its own."""
        async with self.db.engine.begin() as conn:
            result = await conn.execute(
                update(FIRINGS)
                .where(
                    FIRINGS.c.id == firing_id,
                    FIRINGS.c.claimed_by == instance,
                    FIRINGS.c.status == "claimed",
                )
                .values(claimed_until=until)
            )
        return bool(result.rowcount == 1)

    async def release(self, firing_id: str, instance: str) -> None:
        """Give back ``instance``'s claim at once (it is shutting down): the next replica to
        look retakes it."""
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(FIRINGS)
                .where(
                    FIRINGS.c.id == firing_id,
                    FIRINGS.c.claimed_by == instance,
                    FIRINGS.c.status == "claimed",
                )
                .values(claimed_until=0.0)
            )

    async def started(self, firing_id: str, run_id: str, *, steered: bool = False) -> None:
        """The firing's run started (``steered``: its input went into the session's running
        run, ``run_id``): it never fires again."""
        await self._settle(firing_id, status="steered" if steered else "started", run_id=run_id)

    async def failed(self, firing_id: str, error: str, *, code: str) -> None:
        """The firing's run was refused (a removed profile, a refused webhook, …): ``code``
        and ``error`` say why, as an API error would."""
        await self._settle(firing_id, status="failed", error=error[:500], error_code=code)

    async def _settle(self, firing_id: str, **values: Any) -> None:
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(FIRINGS)
                .where(FIRINGS.c.id == firing_id)
                .values(claimed_until=None, **values)
            )

    async def firings(self, owner: str, cron_id: str, *, limit: int = 100) -> list[Firing]:
        """The cron's latest firings, newest first."""
        statement = (
            select(FIRINGS)
            .where(FIRINGS.c.owner == owner, FIRINGS.c.cron_id == cron_id)
            .order_by(FIRINGS.c.scheduled_at.desc())
            .limit(limit)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_firing(row) for row in rows]

    async def latest_firings(self, owner: str, cron_ids: Sequence[str]) -> dict[str, Firing]:
        """Each of ``owner``'s crons' latest firing (by the time it fired for), by cron id;
        a cron never fired is left out. One query, on the ``(cron_id, scheduled_at)`` index."""
        if not cron_ids:
            return {}
        latest = (
            select(FIRINGS.c.cron_id, func.max(FIRINGS.c.scheduled_at).label("at"))
            .where(FIRINGS.c.owner == owner, FIRINGS.c.cron_id.in_(list(cron_ids)))
            .group_by(FIRINGS.c.cron_id)
            .subquery()
        )
        statement = select(FIRINGS).join(
            latest,
            and_(FIRINGS.c.cron_id == latest.c.cron_id, FIRINGS.c.scheduled_at == latest.c.at),
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return {row.cron_id: _firing(row) for row in rows}

    async def cron_of(self, firing: Firing) -> Cron | None:
        return await self.get(firing.owner, firing.cron_id)

    async def forget_firings(self, cron_ids: Sequence[str]) -> None:
        if not cron_ids:
            return
        async with self.db.engine.begin() as conn:
            await conn.execute(delete(FIRINGS).where(FIRINGS.c.cron_id.in_(list(cron_ids))))
