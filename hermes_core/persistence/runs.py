"""The record of every run: who started it, how it ended, and which process ran it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, insert, literal_column, or_, select, update

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import RunRow
from hermes_core.persistence.writer import Phase

RUNS = RunRow.__table__  # type: ignore[attr-defined]
LIVE_STATUSES = ("queued", "running", "stopping")
RECOVERED_ERROR = "The server stopped while this run was in progress."
"""The error of a run crash recovery closed: what no run's own ending says."""

_INSERT = insert(RUNS)
# A run's own updates are fenced by its row: once another replica declared it interrupted
# (this one froze past its lease), a late write of the replica that ran it changes nothing.
# Written into the statement (not an expanding parameter, which executemany cannot take).
_LIVE = RUNS.c.status.in_([literal_column(f"'{status}'") for status in LIVE_STATUSES])
_FINISH = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("b_id"), _LIVE)
    .values(
        status=bindparam("b_status"),
        exit_reason=bindparam("b_exit_reason"),
        iterations=bindparam("b_iterations"),
        model_calls=bindparam("b_model_calls"),
        usage=bindparam("b_usage"),
        cost_usd=bindparam("b_cost_usd"),
        error=bindparam("b_error"),
        ended_at=bindparam("b_now"),
    )
)
_STATUS = (
    update(RUNS).where(RUNS.c.id == bindparam("b_id"), _LIVE).values(status=bindparam("b_status"))
)
_SESSION = (
    update(RUNS).where(RUNS.c.id == bindparam("b_id")).values(session_id=bindparam("b_session"))
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    id: str
    owner: str
    session_id: str | None
    endpoint: str
    model: str
    completion_id: str | None
    status: str
    exit_reason: str | None
    iterations: int
    model_calls: int
    usage: dict[str, int]
    error: str | None
    created_at: float
    ended_at: float | None
    end_user: str | None = None
    """The end user the run was for, when its key named one."""
    cost_usd: float = 0.0
    """What its model calls cost at the configured prices (0 while running, or unpriced)."""


class RunStore:
    def __init__(self, db: Database, *, instance: str) -> None:
        self.db = db
        self.instance = instance
        """This server process's instance name: its runs are the ones it recovers."""

    def started(
        self,
        *,
        run_id: str,
        owner: str,
        endpoint: str,
        model: str,
        session_id: str | None,
        completion_id: str | None,
        created_at: float,
        end_user: str | None = None,
        status: str = "running",
    ) -> None:
        """The run's row. ``status``: ``queued`` for a run begun before it could join its
        session (it is ``running`` once it has: :meth:`status`)."""
        self.db.writer.submit(
            _INSERT,
            {
                "id": run_id,
                "owner": owner,
                "end_user": end_user,
                "session_id": session_id,
                "endpoint": endpoint,
                "model": model,
                "completion_id": completion_id or None,
                "status": status,
                "exit_reason": None,
                "iterations": 0,
                "model_calls": 0,
                "usage": None,
                "cost_usd": 0.0,
                "error": None,
                "instance": self.instance,
                "created_at": created_at,
                "ended_at": None,
            },
            phase=Phase.APPEND,
        )

    def moved(self, run_id: str, session_id: str) -> None:
        """The run now writes to another session (compression started a child)."""
        self.db.writer.submit(
            _SESSION, {"b_id": run_id, "b_session": session_id}, phase=Phase.UPDATE
        )

    def status(self, run_id: str, status: str) -> None:
        self.db.writer.submit(_STATUS, {"b_id": run_id, "b_status": status}, phase=Phase.UPDATE)

    def finished(
        self,
        run_id: str,
        *,
        status: str,
        exit_reason: str,
        iterations: int,
        model_calls: int,
        usage: dict[str, int],
        error: str | None,
        cost_usd: float = 0.0,
    ) -> None:
        self.db.writer.submit(
            _FINISH,
            {
                "b_id": run_id,
                "b_status": status,
                "b_exit_reason": exit_reason,
                "b_iterations": iterations,
                "b_model_calls": model_calls,
                "b_usage": usage,
                "b_cost_usd": cost_usd,
                "b_error": error,
                "b_now": time.time(),
            },
            phase=Phase.SETTLE,
        )

    async def get(self, owner: str, run_id: str) -> RunRecord | None:
        """A run by its id or its completion id, if ``owner`` owns it."""
        await self.db.writer.flush()
        statement = select(RUNS).where(
            RUNS.c.owner == owner, or_(RUNS.c.id == run_id, RUNS.c.completion_id == run_id)
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _record(row) if row is not None else None

    async def live_instances(self) -> set[str]:
        """The instances that have runs marked live (other replicas, or this one)."""
        await self.db.writer.flush()
        statement = select(RUNS.c.instance).where(RUNS.c.status.in_(LIVE_STATUSES)).distinct()
        async with self.db.engine.connect() as conn:
            return {row.instance for row in await conn.execute(statement)}

    async def recover(self, instance: str | None = None) -> list[RunRecord]:
        """Mark the runs ``instance`` (this one by default) left live — it crashed or was
        killed — ``interrupted``, and return them as they were, so their transcripts can be
        closed.

        Each run is recovered once, however many recoveries race: a replica's own recovery at
        its restart, and another's of it as dead (its lease lapsed before it came back), may
        run at once. So the rows read are claimed by one conditional ``UPDATE … RETURNING``:
        a row another recovery (or the run's own ending) took meanwhile no longer matches it
        (PostgreSQL re-reads a row it waited for; SQLite has one writer), and only the runs
        this update changed are returned, to be closed, told of by webhook and released."""
        await self.db.writer.flush()
        live = (RUNS.c.instance == (instance or self.instance)) & RUNS.c.status.in_(LIVE_STATUSES)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(select(RUNS).where(live))).all()
        if not rows:
            return []
        claim = (
            update(RUNS)
            .where(live, RUNS.c.id.in_([row.id for row in rows]))
            .values(
                status="interrupted",
                exit_reason="interrupted",
                error=RECOVERED_ERROR,
                ended_at=time.time(),
            )
            .returning(RUNS.c.id)
        )
        async with self.db.engine.begin() as conn:
            claimed = set((await conn.execute(claim)).scalars())
        return [_record(row) for row in rows if row.id in claimed]

    async def taken_over(self, owner: str, run_id: str) -> bool:
        """Whether the run's row was closed by crash recovery (another replica's, this one's
        lease having lapsed) rather than by its own ending: the row fenced off the ending
        the replica that ran it wrote late (see ``_LIVE``)."""
        run = await self.get(owner, run_id)
        return run is not None and run.status == "interrupted" and run.error == RECOVERED_ERROR


def _record(row: Any) -> RunRecord:
    return RunRecord(
        id=row.id,
        owner=row.owner,
        session_id=row.session_id,
        endpoint=row.endpoint,
        model=row.model,
        completion_id=row.completion_id,
        status=row.status,
        exit_reason=row.exit_reason,
        iterations=row.iterations,
        model_calls=row.model_calls,
        usage=row.usage or {},
        error=row.error,
        created_at=row.created_at,
        ended_at=row.ended_at,
        end_user=row.end_user,
        cost_usd=row.cost_usd or 0.0,
    )
