"""Webhook deliveries, and what ``POST /v1/runs`` keeps beside a run.

A delivery is written at once (not through the write-behind queue): it must outlive this
process from the moment the event happened. Sending is claimed per row with a conditional
UPDATE on ``claimed_until`` (a lease), so among replicas sharing the database one sends a
delivery at a time, and a replica that died holding a claim loses it when the lease runs out.
Delivery is at least once: a replica that dies after the endpoint answered and before it
recorded the answer leaves the row to be sent again, under the same ``webhook-id``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, or_, select, update

from hermes_core.persistence.database import Database
from hermes_core.persistence.keyset import newest_first
from hermes_core.persistence.runs import RunRecord
from hermes_core.persistence.tables import ApiRunRow, RunRow, SessionRow, WebhookDeliveryRow

DELIVERIES = WebhookDeliveryRow.__table__  # type: ignore[attr-defined]
API_RUNS = ApiRunRow.__table__  # type: ignore[attr-defined]
RUNS = RunRow.__table__  # type: ignore[attr-defined]
SESSIONS = SessionRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One event on its way to one endpoint."""

    id: str
    owner: str
    run_id: str | None
    event_id: str
    event_type: str
    body: str
    url: str
    source: str
    secret: str | None
    status: str
    attempts: int
    next_attempt_at: float
    last_status_code: int | None
    last_error: str | None
    created_at: float
    delivered_at: float | None


_FIELDS = tuple(f for f in Delivery.__dataclass_fields__)


def _delivery(row: Any) -> Delivery:
    return Delivery(**{name: getattr(row, name) for name in _FIELDS})


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiRun:
    """What ``POST /v1/runs`` was given beside the run: its metadata, its webhook address."""

    run_id: str
    metadata: dict[str, str]
    webhook_url: str | None
    webhook_secret: str | None = None


class WebhookStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- deliveries ---------------------------------------------------------------------------

    async def add(self, deliveries: Sequence[Delivery]) -> None:
        """Keep ``deliveries`` (pending), committed before this returns."""
        if not deliveries:
            return
        rows = [
            {
                **{name: getattr(d, name) for name in _FIELDS},
                "claimed_by": None,
                "claimed_until": None,
            }
            for d in deliveries
        ]
        async with self.db.engine.begin() as conn:
            await conn.execute(insert(DELIVERIES), rows)

    async def claim(
        self, instance: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[Delivery]:
        """Pending deliveries that are due and unclaimed (or whose claim lapsed), claimed for
        ``instance`` until ``now + lease_seconds``: each row is won by one replica only."""
        free = or_(DELIVERIES.c.claimed_until.is_(None), DELIVERIES.c.claimed_until < now)
        due = and_(DELIVERIES.c.status == "pending", DELIVERIES.c.next_attempt_at <= now, free)
        async with self.db.engine.connect() as conn:
            candidates = (
                await conn.execute(
                    select(DELIVERIES.c.id)
                    .where(due)
                    .order_by(DELIVERIES.c.next_attempt_at)
                    .limit(limit)
                )
            ).all()
        claimed: list[str] = []
        for (delivery_id,) in candidates:
            async with self.db.engine.begin() as conn:
                result = await conn.execute(
                    update(DELIVERIES)
                    .where(DELIVERIES.c.id == delivery_id, due)
                    .values(claimed_by=instance, claimed_until=now + lease_seconds)
                )
            if result.rowcount == 1:
                claimed.append(delivery_id)
        if not claimed:
            return []
        async with self.db.engine.connect() as conn:
            rows = (
                await conn.execute(select(DELIVERIES).where(DELIVERIES.c.id.in_(claimed)))
            ).all()
        return [_delivery(row) for row in rows]

    async def delivered(self, delivery_id: str, *, status_code: int, now: float) -> None:
        await self._settle(
            delivery_id,
            status="delivered",
            last_status_code=status_code,
            last_error=None,
            delivered_at=now,
            attempts=DELIVERIES.c.attempts + 1,
        )

    async def attempt_failed(
        self,
        delivery_id: str,
        *,
        status_code: int | None,
        error: str,
        retry_at: float | None,
    ) -> None:
        """An attempt failed: try again at ``retry_at``, or never (None: the delivery failed)."""
        await self._settle(
            delivery_id,
            status="pending" if retry_at is not None else "failed",
            last_status_code=status_code,
            last_error=error[:500],
            attempts=DELIVERIES.c.attempts + 1,
            **({"next_attempt_at": retry_at} if retry_at is not None else {}),
        )

    async def _settle(self, delivery_id: str, **values: Any) -> None:
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(DELIVERIES)
                .where(DELIVERIES.c.id == delivery_id)
                .values(claimed_by=None, claimed_until=None, **values)
            )

    async def page(
        self, owner: str, *, after: str | None, limit: int, run_id: str | None = None
    ) -> tuple[list[Delivery], bool]:
        """``owner``'s deliveries, newest first, after the one with id ``after``; and whether
        there are more."""
        where = [DELIVERIES.c.owner == owner]
        if run_id is not None:
            where.append(DELIVERIES.c.run_id == run_id)
        rows, more = await newest_first(self.db, DELIVERIES, *where, after=after, limit=limit)
        return [_delivery(row) for row in rows], more

    async def of_run(self, owner: str, run_id: str) -> list[Delivery]:
        statement = (
            select(DELIVERIES)
            .where(DELIVERIES.c.owner == owner, DELIVERIES.c.run_id == run_id)
            .order_by(DELIVERIES.c.created_at, DELIVERIES.c.id)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_delivery(row) for row in rows]

    # --- POST /v1/runs ------------------------------------------------------------------------

    async def remember_run(
        self,
        *,
        run_id: str,
        owner: str,
        metadata: dict[str, str],
        webhook_url: str | None,
        created_at: float,
        webhook_secret: str | None = None,
    ) -> None:
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(API_RUNS),
                {
                    "run_id": run_id,
                    "owner": owner,
                    "metadata": metadata,
                    "webhook_url": webhook_url,
                    "webhook_secret": webhook_secret,
                    "created_at": created_at,
                },
            )

    async def api_runs(self, owner: str, run_ids: Sequence[str]) -> dict[str, ApiRun]:
        if not run_ids:
            return {}
        statement = select(API_RUNS).where(
            API_RUNS.c.owner == owner, API_RUNS.c.run_id.in_(list(run_ids))
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return {
            row.run_id: ApiRun(
                run_id=row.run_id,
                metadata=dict(row.metadata),
                webhook_url=row.webhook_url,
                webhook_secret=row.webhook_secret,
            )
            for row in rows
        }

    async def runs_page(
        self,
        owner: str,
        *,
        after: str | None,
        limit: int,
        end_user: str | None = None,
        status: str | None = None,
        session: str | None = None,
        since: float | None = None,
    ) -> tuple[list[RunRecord], bool]:
        """``owner``'s runs (rows of ``runs``), newest first, after run ``after``; filtered by
        end user (then a session name is one of theirs), status, session (its id, or a name of
        the key's sessions) and creation time."""
        await self.db.writer.flush()  # runs are recorded through the write queue
        where = [RUNS.c.owner == owner]
        sessions_owner = owner
        if end_user is not None:
            where.append(RUNS.c.end_user == end_user)
            sessions_owner = f"{owner}/{end_user}"
        if status is not None:
            where.append(RUNS.c.status == status)
        if since is not None:
            where.append(RUNS.c.created_at >= since)
        if session is not None:
            named = select(SESSIONS.c.id).where(
                SESSIONS.c.owner == sessions_owner, SESSIONS.c.name == session
            )
            where.append(or_(RUNS.c.session_id == session, RUNS.c.session_id.in_(named)))
        rows, more = await newest_first(self.db, RUNS, *where, after=after, limit=limit)
        return [_run(row) for row in rows], more


def _run(row: Any) -> RunRecord:
    return RunRecord(
        **{name: getattr(row, name) for name in RunRecord.__dataclass_fields__ if name != "usage"},
        usage=row.usage or {},
    )
