"""Approvals asked of a human: who may answer, what they were asked, and what they said.

An approval is written when a run asks (so that a later turn, another request or a restart
finds it) and decided once: the decision only ever moves a *pending* row, so two answers
racing each other cannot both win.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import insert, select, update

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import ApprovalRow
from hermes_core.persistence.writer import Phase

APPROVALS = ApprovalRow.__table__  # type: ignore[attr-defined]
_INSERT = insert(APPROVALS)

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]
ApprovalScope = Literal["once", "session"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    id: str
    owner: str
    conversation_owner: str
    conversation: str
    session_id: str | None
    run_id: str
    profile: str
    call_id: str
    tool: str
    toolset: str
    arguments: dict[str, Any]
    reason: str
    status: ApprovalStatus
    scope: ApprovalScope
    created_at: float
    expires_at: float
    decided_at: float | None = None
    resumed_by: str | None = None

    def expired_at(self, now: float) -> bool:
        return self.status == "pending" and now >= self.expires_at


class ApprovalStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, record: ApprovalRecord) -> None:
        """Record a new (pending) approval; queued with the run's other writes."""
        values = {name: getattr(record, name) for name in _FIELDS}
        self.db.writer.submit(_INSERT, values, phase=Phase.APPEND)

    async def get(self, owner: str, approval_id: str) -> ApprovalRecord | None:
        rows = await self._select((APPROVALS.c.id == approval_id) & (APPROVALS.c.owner == owner))
        return rows[0] if rows else None

    async def of_run(self, owner: str, run_id: str) -> list[ApprovalRecord]:
        """Every approval ``run_id`` asked for, in the order asked."""
        return await self._select((APPROVALS.c.run_id == run_id) & (APPROVALS.c.owner == owner))

    async def open(self, conversation_owner: str, conversation: str) -> list[ApprovalRecord]:
        """The conversation's approvals no run has acted on yet, answered or not (expired
        ones included), oldest first: what the conversation's next run must settle."""
        return await self._select(
            (APPROVALS.c.conversation_owner == conversation_owner)
            & (APPROVALS.c.conversation == conversation)
            & APPROVALS.c.resumed_by.is_(None)
        )

    async def granted(self, conversation_owner: str, conversation: str, tool: str) -> bool:
        """Whether the conversation holds a standing grant for ``tool``."""
        found = await self._select(
            (APPROVALS.c.conversation_owner == conversation_owner)
            & (APPROVALS.c.conversation == conversation)
            & (APPROVALS.c.status == "approved")
            & (APPROVALS.c.scope == "session")
            & (APPROVALS.c.tool == tool),
            limit=1,
        )
        return bool(found)

    async def decide(
        self,
        approval_id: str,
        status: ApprovalStatus,
        *,
        now: float,
        scope: ApprovalScope = "once",
    ) -> bool:
        """Answer a pending approval; False when it was not pending any more."""
        await self.db.writer.flush()
        statement = (
            update(APPROVALS)
            .where((APPROVALS.c.id == approval_id) & (APPROVALS.c.status == "pending"))
            .values(status=status, scope=scope, decided_at=now)
        )
        async with self.db.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def claim(self, approval_ids: list[str], run_id: str) -> int:
        """Mark approvals as acted on by ``run_id`` (those no other run claimed first)."""
        if not approval_ids:
            return 0
        await self.db.writer.flush()
        statement = (
            update(APPROVALS)
            .where(APPROVALS.c.id.in_(approval_ids) & APPROVALS.c.resumed_by.is_(None))
            .values(resumed_by=run_id)
        )
        async with self.db.engine.begin() as conn:
            result = await conn.execute(statement)
        return int(result.rowcount)

    async def _select(self, where: Any, *, limit: int | None = None) -> list[ApprovalRecord]:
        await self.db.writer.flush()
        statement = select(APPROVALS).where(where).order_by(APPROVALS.c.created_at)
        if limit is not None:
            statement = statement.limit(limit)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_record(row) for row in rows]


_FIELDS = tuple(column.name for column in APPROVALS.columns)


def _record(row: Any) -> ApprovalRecord:
    values = {name: getattr(row, name) for name in _FIELDS}
    values["arguments"] = values["arguments"] or {}
    return ApprovalRecord(**values)
