"""Deleting what is past its retention, and a whole conversation on request.

Everything here deletes in batches of at most :data:`BATCH` rows per statement and
transaction: a sweep over years of history never holds one huge transaction (on SQLite that
would stall every run's writes behind it; on PostgreSQL, bloat and long locks). The
batch-wise operations are async generators that finish each batch's transaction before they
yield, so the caller (the sweeper) can check its lease between batches and stop.

A conversation's sessions are deleted under its turn lock (``session_locks``), taken here as a
turn takes it: a conversation whose run holds it is skipped (its sessions are live), and no
turn can begin in it while its sessions go, so no run appends to a deleted session. On SQLite
the full-text index must have indexed what it is told to forget
(:meth:`~hermes_core.persistence.search_index.SearchIndex.catch_up` runs first).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, and_, delete, exists, or_, select, true, update
from sqlalchemy.sql import ColumnElement

from hermes_core.persistence.crons import FIRINGS
from hermes_core.persistence.database import Database
from hermes_core.persistence.files import FILES, FileRecord, delete_files
from hermes_core.persistence.idempotency import KEYS as IDEMPOTENCY_KEYS
from hermes_core.persistence.runs import LIVE_STATUSES, RUNS
from hermes_core.persistence.search_index import LOWER_WATERMARK
from hermes_core.persistence.sessions import LOCKS, MESSAGES, SESSIONS, take_turn_lock
from hermes_core.persistence.skills import SKILLS
from hermes_core.persistence.tables import (
    ApiRunRow,
    ApprovalRow,
    TodoRow,
    WebhookDeliveryRow,
)

APPROVALS = ApprovalRow.__table__  # type: ignore[attr-defined]
TODOS = TodoRow.__table__  # type: ignore[attr-defined]
API_RUNS = ApiRunRow.__table__  # type: ignore[attr-defined]
DELIVERIES = WebhookDeliveryRow.__table__  # type: ignore[attr-defined]

BATCH = 500
"""Rows one delete statement (and transaction) removes at most."""
LOCK_SECONDS = 600.0
"""How long the sweeper holds a conversation's turn lock at most (a crash frees it then, or
when this replica is recovered)."""

Counts = dict[str, int]
"""Rows deleted, by table (``messages``, ``sessions``, …)."""


def add_counts(total: Counts, more: Mapping[str, int]) -> Counts:
    for name, count in more.items():
        total[name] = total.get(name, 0) + count
    return total


@dataclass(frozen=True, slots=True)
class Horizon:
    """Which rows are past retention: those older than ``default`` (a UNIX time; None keeps
    them), except a profile named in ``by_profile``, held to its own time instead (None: its
    rows are kept)."""

    default: float | None = None
    by_profile: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing is past it: every kind of row is kept forever."""
        return self.default is None and all(at is None for at in self.by_profile.values())

    def expired(self, profile: Any, at: Any) -> ColumnElement[bool]:
        """The condition of a row (its profile column, its time column) past the horizon."""
        cases: list[ColumnElement[bool]] = [
            and_(profile == name, at < cutoff)
            for name, cutoff in self.by_profile.items()
            if cutoff is not None
        ]
        if self.default is not None:
            others = profile.not_in(list(self.by_profile)) if self.by_profile else true()
            cases.append(and_(others, at < self.default))
        return or_(*cases) if cases else and_(true(), ~true())


@dataclass(frozen=True, slots=True)
class ExpiredSessions:
    """One batch of a session sweep: what was deleted, and the conversations (owner, name)
    left with no session at all (their workspaces may go)."""

    counts: Counts
    gone: list[tuple[str, str]]


async def delete_chunked(db: Database, table: Table, key: Any, where: Any) -> int:
    """Delete ``table``'s rows matching ``where``, about :data:`BATCH` of them (by their
    ``key`` column, which need not be unique: the delete holds to ``where`` too) per
    transaction; how many. Deleting messages lowers the search index's watermark with them
    (``search_index.LOWER_WATERMARK``)."""
    total = 0
    while True:
        async with db.engine.begin() as conn:
            keys = (await conn.execute(select(key).where(where).limit(BATCH))).scalars().all()
            if not keys:
                return total
            result = await conn.execute(delete(table).where(where, key.in_(keys)))
            total += int(result.rowcount or 0)
            if table is MESSAGES and db.search_index.batched:
                await conn.execute(LOWER_WATERMARK)
        if len(keys) < BATCH:
            return total


async def index_before_deleting(db: Database) -> None:
    """Bring SQLite's full-text index up to date before messages are deleted (FTS5 forgets
    a row by the text it indexed). Not when there are no messages at all: indexing then
    fails (it would set its watermark to the maximum of no ids)."""
    await db.writer.flush()
    if not db.search_index.batched:
        return
    async with db.engine.connect() as conn:
        if (await conn.execute(select(MESSAGES.c.id).limit(1))).first() is None:
            return
    await db.search_index.catch_up()


def chunks(items: Sequence[str], size: int = BATCH) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RetentionStore:
    def __init__(self, db: Database, *, instance: str | None = None) -> None:
        self.db = db
        self.instance = instance
        """The replica whose locks these are (recovering it frees them if it dies)."""

    # --- one conversation, on request -------------------------------------------------------

    async def has_conversation(self, owner: str, name: str) -> bool:
        statement = select(SESSIONS.c.id).where(SESSIONS.c.owner == owner, SESSIONS.c.name == name)
        await self.db.writer.flush()
        async with self.db.engine.connect() as conn:
            return (await conn.execute(statement.limit(1))).first() is not None

    async def delete_conversation(self, owner: str, name: str) -> Counts:
        """Delete every session (branch) of ``owner``'s conversation ``name``, their messages
        and todos, and the conversation's approvals. The caller holds its turn lock."""
        await index_before_deleting(self.db)
        where = and_(SESSIONS.c.owner == owner, SESSIONS.c.name == name)
        async with self.db.engine.connect() as conn:
            ids = list((await conn.execute(select(SESSIONS.c.id).where(where))).scalars())
        counts = await self._delete_sessions(ids)
        counts["approvals"] += await self._delete_approvals_of(owner, name)
        return counts

    # --- sweeping -----------------------------------------------------------------------------

    async def expire_sessions(
        self, horizon: Horizon, *, holder: str
    ) -> AsyncGenerator[ExpiredSessions, None]:
        """Delete sessions not updated since ``horizon`` (by profile), with their messages,
        todos and approvals, conversation by conversation under its turn lock (``holder``
        names the sweep in it). A conversation whose run holds the lock is skipped. Yields
        after each batch of sessions looked at."""
        if horizon.empty:
            return
        expired = horizon.expired(SESSIONS.c.profile, SESSIONS.c.updated_at)
        after = ""
        while True:
            statement = (
                select(SESSIONS.c.id, SESSIONS.c.owner, SESSIONS.c.name)
                .where(expired, SESSIONS.c.id > after)
                .order_by(SESSIONS.c.id)
                .limit(BATCH)
            )
            async with self.db.engine.connect() as conn:
                rows = (await conn.execute(statement)).all()
            if not rows:
                return
            if not after:
                await index_before_deleting(self.db)
            after = rows[-1].id
            counts: Counts = {}
            gone: list[tuple[str, str]] = []
            conversations = {(row.owner, row.name or row.id): row.name for row in rows}
            for (owner, conversation), name in conversations.items():
                done = await self._expire_conversation(
                    owner, conversation, named=name is not None, expired=expired, holder=holder
                )
                if done is None:
                    continue
                add_counts(counts, done[0])
                if done[1]:
                    gone.append((owner, conversation))
            yield ExpiredSessions(counts, gone)
            if len(rows) < BATCH:
                return

    async def _expire_conversation(
        self, owner: str, conversation: str, *, named: bool, expired: Any, holder: str
    ) -> tuple[Counts, bool] | None:
        """Delete the conversation's expired sessions; None when a run holds it, else the
        counts and whether no session of it is left."""
        if not await self._lock(owner, conversation, holder):
            return None
        try:
            of_it = and_(
                SESSIONS.c.owner == owner,
                SESSIONS.c.name == conversation
                if named
                else and_(SESSIONS.c.name.is_(None), SESSIONS.c.id == conversation),
            )
            live_run = exists().where(
                RUNS.c.session_id == SESSIONS.c.id, RUNS.c.status.in_(LIVE_STATUSES)
            )
            async with self.db.engine.connect() as conn:
                ids = list(
                    (
                        await conn.execute(select(SESSIONS.c.id).where(of_it, expired, ~live_run))
                    ).scalars()
                )
                if not ids:
                    return {}, False
            counts = await self._delete_sessions(ids)
            async with self.db.engine.connect() as conn:
                left = (await conn.execute(select(SESSIONS.c.id).where(of_it).limit(1))).first()
            if left is None:
                counts["approvals"] += await self._delete_approvals_of(owner, conversation)
            return counts, left is None
        finally:
            async with self.db.engine.begin() as conn:
                await conn.execute(
                    delete(LOCKS).where(
                        LOCKS.c.owner == owner,
                        LOCKS.c.name == conversation,
                        LOCKS.c.run_id == holder,
                    )
                )

    async def _lock(self, owner: str, name: str, holder: str) -> bool:
        """The conversation's turn lock, as :meth:`SessionStore.lock` takes it."""
        return await take_turn_lock(
            self.db, owner, name, holder, lease_seconds=LOCK_SECONDS, instance=self.instance
        )

    async def expire_runs(self, horizon: Horizon) -> AsyncGenerator[Counts, None]:
        """Delete the records of runs that ended before ``horizon`` (by their profile), with
        their ``api_runs`` rows and webhook deliveries; yields after each batch."""
        if horizon.empty:
            return
        where = and_(
            horizon.expired(RUNS.c.model, RUNS.c.ended_at),
            RUNS.c.ended_at.is_not(None),
            RUNS.c.status.not_in(LIVE_STATUSES),
        )
        while True:
            async with self.db.engine.begin() as conn:
                ids = list(
                    (await conn.execute(select(RUNS.c.id).where(where).limit(BATCH))).scalars()
                )
                if not ids:
                    return
                counts = await delete_runs(conn, ids)
            yield counts
            if len(ids) < BATCH:
                return

    async def expire_approvals(
        self, horizon: Horizon, *, now: float
    ) -> AsyncGenerator[Counts, None]:
        """Delete approvals asked before ``horizon`` (by profile) that nobody may answer any
        more; yields after each batch."""
        if horizon.empty:
            return
        where = and_(
            horizon.expired(APPROVALS.c.profile, APPROVALS.c.created_at),
            or_(APPROVALS.c.status != "pending", APPROVALS.c.expires_at < now),
        )
        while True:
            async with self.db.engine.begin() as conn:
                ids = list(
                    (await conn.execute(select(APPROVALS.c.id).where(where).limit(BATCH))).scalars()
                )
                if not ids:
                    return
                result = await conn.execute(delete(APPROVALS).where(APPROVALS.c.id.in_(ids)))
            yield {"approvals": int(result.rowcount or 0)}
            if len(ids) < BATCH:
                return

    def expire_files(self, before: float) -> AsyncGenerator[list[FileRecord], None]:
        """Delete the records of files uploaded before ``before``; yields each batch's
        records, whose bytes the caller removes."""
        return delete_files(self.db, FILES.c.created_at < before, BATCH)

    async def existing_skills(self, skill_ids: Sequence[str]) -> set[str]:
        """Which of ``skill_ids`` are still skills (a replica's cache of the others can go)."""
        found: set[str] = set()
        async with self.db.engine.connect() as conn:
            for chunk in chunks(skill_ids):
                statement = select(SKILLS.c.id).where(SKILLS.c.id.in_(list(chunk)))
                found.update((await conn.execute(statement)).scalars())
        return found

    # --- shared -------------------------------------------------------------------------------

    async def _delete_sessions(self, ids: Sequence[str]) -> Counts:
        """Delete these sessions with their messages (in batches), todos and approvals."""
        counts: Counts = {"sessions": 0, "messages": 0, "todos": 0, "approvals": 0}
        for chunk in chunks(ids):
            listed = list(chunk)
            counts["messages"] += await delete_chunked(
                self.db, MESSAGES, MESSAGES.c.id, MESSAGES.c.session_id.in_(listed)
            )
            async with self.db.engine.begin() as conn:
                for name, table, column in (
                    ("todos", TODOS, TODOS.c.session_id),
                    ("approvals", APPROVALS, APPROVALS.c.session_id),
                    ("sessions", SESSIONS, SESSIONS.c.id),
                ):
                    result = await conn.execute(delete(table).where(column.in_(listed)))
                    counts[name] += int(result.rowcount or 0)
        return counts

    async def _delete_approvals_of(self, owner: str, conversation: str) -> int:
        """The conversation's remaining approvals (standing grants, ones of no session)."""
        return await delete_chunked(
            self.db,
            APPROVALS,
            APPROVALS.c.id,
            and_(APPROVALS.c.conversation_owner == owner, APPROVALS.c.conversation == conversation),
        )


async def delete_runs(conn: Any, ids: list[str]) -> Counts:
    """Delete these runs' records, with their ``api_runs`` rows, webhook deliveries and the
    idempotency keys that replay their answers (a stored answer is the run's content). A cron
    firing that started one of them keeps its row, which guards its time against a second
    firing, and forgets the run."""
    counts: Counts = {}
    for name, table, column in (
        ("api_runs", API_RUNS, API_RUNS.c.run_id),
        ("webhook_deliveries", DELIVERIES, DELIVERIES.c.run_id),
        ("idempotency_keys", IDEMPOTENCY_KEYS, IDEMPOTENCY_KEYS.c.run_id),
        ("runs", RUNS, RUNS.c.id),
    ):
        result = await conn.execute(delete(table).where(column.in_(ids)))
        counts[name] = int(result.rowcount or 0)
    await conn.execute(update(FIRINGS).where(FIRINGS.c.run_id.in_(ids)).values(run_id=None))
    return counts
