"""Erasing an end user: every row of one person behind a key (a privacy request).

An end user ``U`` behind the key ``K`` (docs/end-users.md) owns two kinds of rows:

- what is kept per *conversation owner*, under the scoped owner ``K/U``: sessions (their
  messages and todos), conversation locks, memory, approvals, and the skills the agent
  wrote for them;
- what is kept per *key*, marked with the end user: runs (``runs.end_user``; also any run of
  one of their sessions), their ``api_runs`` rows, webhook deliveries and idempotency keys,
  responses, conversations, uploaded files and the usage ledger's rows.

:meth:`ErasureStore.erase` deletes all of them in batches (see
:mod:`~hermes_core.persistence.retention`) and says how many rows of each table went, with
what the caller still has to remove from disk (the files' bytes, the skills' cached folders).
It does not stop runs: the caller stops the end user's live runs first
(:meth:`ErasureStore.live_runs`), or what they write next would outlive the erasure.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from sqlalchemy import Select, and_, or_, select

from hermes_core.persistence.database import Database
from hermes_core.persistence.files import FILES, FileRecord, delete_files
from hermes_core.persistence.retention import (
    APPROVALS,
    BATCH,
    Counts,
    add_counts,
    delete_chunked,
    delete_runs,
    index_before_deleting,
)
from hermes_core.persistence.runs import LIVE_STATUSES, RUNS
from hermes_core.persistence.sessions import LOCKS, MESSAGES, SESSIONS
from hermes_core.persistence.skills import SKILLS, VERSIONS
from hermes_core.persistence.tables import (
    ConversationRow,
    MemoryRow,
    ResponseRow,
    TodoRow,
    UsageDailyRow,
)

CONVERSATIONS = ConversationRow.__table__  # type: ignore[attr-defined]
MEMORY = MemoryRow.__table__  # type: ignore[attr-defined]
RESPONSES = ResponseRow.__table__  # type: ignore[attr-defined]
TODOS = TodoRow.__table__  # type: ignore[attr-defined]
USAGE = UsageDailyRow.__table__  # type: ignore[attr-defined]


@dataclass(slots=True)
class Erased:
    """What an erasure deleted (rows by table), and what of it lives on disk too."""

    counts: Counts = field(default_factory=dict)
    files: list[FileRecord] = field(default_factory=list)
    """The uploaded files whose records went: their bytes are the caller's to remove."""
    skill_ids: list[str] = field(default_factory=list)
    """The skills that went: their cached folders (``skills-cache/<id>``) can go."""
    run_ids: list[str] = field(default_factory=list)
    """The runs whose records went: replicas still holding their events in memory (or in
    Redis) must forget them too."""


class ErasureStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def live_runs(self, key: str, end_user: str) -> set[str]:
        """The runs in progress for ``end_user`` behind ``key``: live run records naming
        them (or one of their sessions), and the runs holding their conversations' locks
        (a run in its first moments has a lock before its record is written)."""
        scoped = _scoped(key, end_user)
        await self.db.writer.flush()
        runs = select(RUNS.c.id).where(
            RUNS.c.owner == key,
            RUNS.c.status.in_(LIVE_STATUSES),
            or_(RUNS.c.end_user == end_user, RUNS.c.session_id.in_(_sessions_of(scoped))),
        )
        locks = select(LOCKS.c.run_id).where(
            LOCKS.c.owner == scoped, LOCKS.c.lease_until >= time.time()
        )
        async with self.db.engine.connect() as conn:
            found = set((await conn.execute(runs)).scalars())
            found.update((await conn.execute(locks)).scalars())
        return found

    async def erase(self, key: str, end_user: str) -> Erased:
        """Delete every row of ``end_user`` behind ``key`` (the module says which)."""
        scoped = _scoped(key, end_user)
        await index_before_deleting(self.db)
        erased = Erased()
        counts = erased.counts
        sessions = _sessions_of(scoped)
        their_runs = and_(
            RUNS.c.owner == key,
            or_(RUNS.c.end_user == end_user, RUNS.c.session_id.in_(sessions)),
        )
        # Responses and runs first: they are found through the sessions.
        counts["responses"] = await delete_chunked(
            self.db,
            RESPONSES,
            RESPONSES.c.id,
            and_(
                RESPONSES.c.owner == key,
                or_(
                    RESPONSES.c.end_user == end_user,
                    RESPONSES.c.session_id.in_(sessions),
                    RESPONSES.c.run_id.in_(select(RUNS.c.id).where(their_runs)),
                ),
            ),
        )
        add_counts(
            counts, {"runs": 0, "api_runs": 0, "webhook_deliveries": 0, "idempotency_keys": 0}
        )
        run_ids = erased.run_ids
        while True:
            async with self.db.engine.begin() as conn:
                ids = list(
                    (await conn.execute(select(RUNS.c.id).where(their_runs).limit(BATCH))).scalars()
                )
                if ids:
                    add_counts(counts, await delete_runs(conn, ids))
                    run_ids.extend(ids)
            if len(ids) < BATCH:
                break
        counts["approvals"] = await delete_chunked(
            self.db, APPROVALS, APPROVALS.c.id, APPROVALS.c.conversation_owner == scoped
        )
        counts["todos"] = await delete_chunked(
            self.db, TODOS, TODOS.c.session_id, TODOS.c.session_id.in_(sessions)
        )
        counts["messages"] = await delete_chunked(
            self.db, MESSAGES, MESSAGES.c.id, MESSAGES.c.session_id.in_(sessions)
        )
        counts["sessions"] = await delete_chunked(
            self.db, SESSIONS, SESSIONS.c.id, SESSIONS.c.owner == scoped
        )
        counts["session_locks"] = await delete_chunked(
            self.db, LOCKS, LOCKS.c.name, LOCKS.c.owner == scoped
        )
        counts["memory"] = await delete_chunked(
            self.db, MEMORY, MEMORY.c.target, MEMORY.c.scope == scoped
        )
        async with self.db.engine.connect() as conn:
            erased.skill_ids = list(
                (await conn.execute(select(SKILLS.c.id).where(SKILLS.c.owner == scoped))).scalars()
            )
        counts["skill_versions"] = await delete_chunked(
            self.db,
            VERSIONS,
            VERSIONS.c.id,
            VERSIONS.c.skill_id.in_(select(SKILLS.c.id).where(SKILLS.c.owner == scoped)),
        )
        counts["skills"] = await delete_chunked(
            self.db, SKILLS, SKILLS.c.id, SKILLS.c.owner == scoped
        )
        theirs = and_(FILES.c.owner == key, FILES.c.end_user == end_user)
        counts["files"] = 0
        async with contextlib.aclosing(delete_files(self.db, theirs, BATCH)) as batches:
            async for records in batches:
                erased.files.extend(records)
                counts["files"] += len(records)
        counts["conversations"] = await delete_chunked(
            self.db,
            CONVERSATIONS,
            CONVERSATIONS.c.id,
            and_(CONVERSATIONS.c.owner == key, CONVERSATIONS.c.end_user == end_user),
        )
        counts["usage_daily"] = await delete_chunked(
            self.db,
            USAGE,
            USAGE.c.day,
            and_(USAGE.c.owner == key, USAGE.c.end_user == end_user),
        )
        return erased


def _scoped(key: str, end_user: str) -> str:
    """The owner of the end user's conversations (``server/serving/end_users.py``)."""
    return f"{key}/{end_user}"


def _sessions_of(scoped: str) -> Select[tuple[str]]:
    return select(SESSIONS.c.id).where(SESSIONS.c.owner == scoped)
