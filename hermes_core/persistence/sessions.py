"""Sessions and their transcripts.

Writes go through the shared write queue (they cost the caller nothing); reads go straight to
the database. A caller that reads what it may just have written flushes the queue first.

A session's *actual* transcript is what the model sees. Its *logical* transcript is the whole
conversation as it happened: for a compression child that is its base session's logical
transcript followed by the child's own (non-compacted) messages. Clients' histories are
compared with the logical one; forks copy from the actual ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, delete, insert, literal, or_, select, update
from sqlalchemy.exc import IntegrityError

from hermes_core.ids import token_hex
from hermes_core.persistence.database import Database
from hermes_core.persistence.rows import StoredMessage, message_row, stored_message
from hermes_core.persistence.tables import MessageRow, SessionLockRow, SessionRow
from hermes_core.persistence.writer import Phase
from hermes_core.usage import Usage

SESSIONS = SessionRow.__table__  # type: ignore[attr-defined]
MESSAGES = MessageRow.__table__  # type: ignore[attr-defined]
LOCKS = SessionLockRow.__table__  # type: ignore[attr-defined]

_INSERT_SESSION = insert(SESSIONS)
_INSERT_MESSAGE = insert(MESSAGES)
_CHILD_COPIES = ("owner", "name", "profile", "title", "system_prompt")
_CHILD_COLUMNS = [
    *_CHILD_COPIES,
    *("id", "parent_id", "origin", "base_id", "created_at", "updated_at"),
    *("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"),
    "reasoning_tokens",
]
_INSERT_CHILD = insert(SESSIONS).from_select(
    _CHILD_COLUMNS,
    select(
        *(SESSIONS.c[name] for name in _CHILD_COPIES),
        bindparam("b_child"),
        SESSIONS.c.id,
        literal("compression"),
        SESSIONS.c.id,
        bindparam("b_now"),
        bindparam("b_now"),
        *(literal(0) for _ in range(5)),
    ).where(SESSIONS.c.id == bindparam("b_parent")),
)
_ADD_USAGE = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("b_id"))
    .values(
        updated_at=bindparam("b_now"),
        input_tokens=SESSIONS.c.input_tokens + bindparam("b_input"),
        output_tokens=SESSIONS.c.output_tokens + bindparam("b_output"),
        cache_read_tokens=SESSIONS.c.cache_read_tokens + bindparam("b_read"),
        cache_write_tokens=SESSIONS.c.cache_write_tokens + bindparam("b_write"),
        reasoning_tokens=SESSIONS.c.reasoning_tokens + bindparam("b_reasoning"),
    )
)
_END = (
    update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("b_id"))
    .values(ended_at=bindparam("b_now"), end_reason=bindparam("b_reason"))
)
_UNLOCK = delete(LOCKS).where(
    LOCKS.c.owner == bindparam("b_owner"),
    LOCKS.c.name == bindparam("b_name"),
    LOCKS.c.run_id == bindparam("b_run"),
)
TITLE_CHARS = 80


def new_session_id() -> str:
    return f"sess_{token_hex(12)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionInfo:
    id: str
    owner: str
    name: str | None
    profile: str
    title: str
    system_prompt: str
    parent_id: str | None
    origin: str | None
    base_id: str | None
    created_at: float
    updated_at: float
    ended_at: float | None
    end_reason: str | None
    usage: Usage


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    """A message of a logical transcript and where it is stored."""

    stored: StoredMessage
    session_id: str
    position: int


class SessionStore:
    def __init__(self, db: Database, *, instance: str | None = None) -> None:
        self.db = db
        self.instance = instance
        """The replica this store's locks are taken for (see :meth:`unlock_instance`)."""

    # --- writing (queued) ---------------------------------------------------------------------

    def create(
        self,
        *,
        owner: str,
        profile: str,
        system_prompt: str,
        name: str | None = None,
        title: str = "",
        parent_id: str | None = None,
        origin: str | None = None,
        base_id: str | None = None,
        session_id: str | None = None,
    ) -> str:
        session_id = session_id or new_session_id()
        now = time.time()
        self.db.writer.submit(
            _INSERT_SESSION,
            {
                "id": session_id,
                "owner": owner,
                "name": name,
                "profile": profile,
                "title": title[:TITLE_CHARS],
                "system_prompt": system_prompt,
                "parent_id": parent_id,
                "origin": origin,
                "base_id": base_id,
                "created_at": now,
                "updated_at": now,
                "ended_at": None,
                "end_reason": None,
                "input_tokens": 0,
                "output_tokens": 0,
                "cache_read_tokens": 0,
                "cache_write_tokens": 0,
                "reasoning_tokens": 0,
            },
            phase=Phase.CREATE,
        )
        return session_id

    def create_compression_child(self, parent_id: str, child_id: str) -> None:
        """A child that continues ``parent_id`` after compression: same owner, name, profile
        and frozen prompt, copied inside the database (no read on the caller's path)."""
        now = time.time()
        self.db.writer.submit(
            _INSERT_CHILD,
            {"b_child": child_id, "b_parent": parent_id, "b_now": now},
            phase=Phase.DERIVE,
        )

    def add_messages(self, session_id: str, start: int, messages: Sequence[StoredMessage]) -> None:
        if not messages:
            return
        now = time.time()
        writer = self.db.writer
        for offset, stored in enumerate(messages):
            writer.submit(
                _INSERT_MESSAGE,
                message_row(session_id, start + offset, stored, now=now),
                phase=Phase.APPEND,
            )
        self.db.search_index.appended()

    def add_usage(self, session_id: str, usage: Usage) -> None:
        self.db.writer.submit(
            _ADD_USAGE,
            {
                "b_id": session_id,
                "b_now": time.time(),
                "b_input": usage.input_tokens,
                "b_output": usage.output_tokens,
                "b_read": usage.cache_read_tokens,
                "b_write": usage.cache_write_tokens,
                "b_reasoning": usage.reasoning_tokens,
            },
            phase=Phase.UPDATE,
        )

    def end(self, session_id: str, reason: str) -> None:
        self.db.writer.submit(
            _END, {"b_id": session_id, "b_now": time.time(), "b_reason": reason}, phase=Phase.UPDATE
        )

    # --- the turn lock --------------------------------------------------------------------------

    async def lock(self, owner: str, name: str, run_id: str, *, lease_seconds: float) -> bool:
        """Take the turn of conversation ``name`` for ``run_id``, unless a live run holds it.

        Portable and atomic: drop an expired lease, then insert; the primary key refuses a
        second holder on every engine.
        """
        await self.db.writer.flush()
        return await take_turn_lock(
            self.db, owner, name, run_id, lease_seconds=lease_seconds, instance=self.instance
        )

    def unlock(self, owner: str, name: str, run_id: str) -> None:
        """Give the turn back (queued: the next turn's :meth:`lock` flushes first)."""
        self.db.writer.submit(
            _UNLOCK, {"b_owner": owner, "b_name": name, "b_run": run_id}, phase=Phase.RELEASE
        )

    async def unlock_runs(self, run_ids: Sequence[str]) -> None:
        """Free every lock held by these (dead) runs."""
        if run_ids:
            async with self.db.engine.begin() as conn:
                await conn.execute(delete(LOCKS).where(LOCKS.c.run_id.in_(list(run_ids))))

    async def unlock_instance(self, instance: str) -> int:
        """Free every lock held by runs of ``instance`` (a replica that died, or this one's
        previous life), even those whose run's row was never written; returns how many."""
        async with self.db.engine.begin() as conn:
            result = await conn.execute(delete(LOCKS).where(LOCKS.c.instance == instance))
        return int(result.rowcount or 0)

    async def lock_holders(self) -> set[str]:
        """The replicas holding conversation locks (a dead one may hold them with no live run
        row to show for it)."""
        statement = select(LOCKS.c.instance).where(LOCKS.c.instance.is_not(None)).distinct()
        async with self.db.engine.connect() as conn:
            return {row.instance for row in await conn.execute(statement)}

    # --- reading ------------------------------------------------------------------------------

    async def get(self, owner: str, session_id: str) -> SessionInfo | None:
        async with self.db.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(SESSIONS).where(SESSIONS.c.id == session_id, SESSIONS.c.owner == owner)
                )
            ).first()
        return _info(row) if row is not None else None

    async def tips(self, owner: str, name: str, *, limit: int = 10) -> list[SessionInfo]:
        """The live branches of the conversation ``name``: newest first, compressed-away
        parents left out (their child continues them)."""
        statement = (
            select(SESSIONS)
            .where(
                SESSIONS.c.owner == owner,
                SESSIONS.c.name == name,
                or_(SESSIONS.c.end_reason.is_(None), SESSIONS.c.end_reason != "compression"),
            )
            .order_by(SESSIONS.c.updated_at.desc())
            .limit(limit)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_info(row) for row in rows]

    async def messages(self, session_id: str) -> list[StoredMessage]:
        """The actual transcript, in order."""
        statement = (
            select(MESSAGES)
            .where(MESSAGES.c.session_id == session_id)
            .order_by(MESSAGES.c.position)
        )
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [stored_message(row) for row in rows]

    async def logical(self, session: SessionInfo) -> list[LogicalMessage]:
        """The whole conversation as it happened (see the module docstring)."""
        base: list[LogicalMessage] = []
        if session.base_id is not None:
            parent = await self.get(session.owner, session.base_id)
            if parent is not None:
                base = await self.logical(parent)
        own = await self.messages(session.id)
        return base + [
            LogicalMessage(stored=stored, session_id=session.id, position=position)
            for position, stored in enumerate(own)
            if not stored.compacted
        ]

    # --- branching ----------------------------------------------------------------------------

    async def fork(
        self, source: SessionInfo, at: int, *, apart: bool = False
    ) -> tuple[str, list[StoredMessage]]:
        """A child of ``source`` that keeps its logical transcript up to ``at`` (exclusive).

        Returns the child's id and its actual transcript. When ``at`` falls inside history
        that ``source`` only holds in compacted form, the child copies the uncompressed
        messages from the base session instead. ``apart``: the child is a conversation of its
        own, named by its id, not a branch of ``source``'s conversation.
        """
        child, messages, save = await self.planned_fork(source, at, apart=apart)
        save()
        return child, messages

    async def planned_fork(
        self, source: SessionInfo, at: int, *, apart: bool = False
    ) -> tuple[str, list[StoredMessage], Callable[[], None]]:
        """:meth:`fork`, written only when the function it returns is called (a turn's fork
        is kept only once its run has started)."""
        holder, kept, base_id = await self._fork_point(source, at)
        messages = (await self.messages(holder.id))[:kept]
        child = new_session_id()

        def save() -> None:
            self.create(
                session_id=child,
                owner=source.owner,
                profile=source.profile,
                system_prompt=source.system_prompt,
                name=child if apart else source.name,
                title=source.title,
                parent_id=source.id,
                origin="fork",
                base_id=base_id,
            )
            self.add_messages(child, 0, messages)

        return child, messages, save

    async def prefix(self, source: SessionInfo, at: int) -> list[StoredMessage]:
        """The actual transcript a fork of ``source`` at ``at`` would start with (see
        :meth:`fork`), creating nothing."""
        holder, kept, _base_id = await self._fork_point(source, at)
        return (await self.messages(holder.id))[:kept]

    async def logical_position(self, session: SessionInfo, position: int) -> int:
        """Where the actual transcript's ``position`` falls in the logical one."""
        _base, base_length, compacted = await self._offsets(session)
        return base_length + max(position - compacted, 0)

    async def _fork_point(
        self, session: SessionInfo, at: int
    ) -> tuple[SessionInfo, int, str | None]:
        """Which session's actual messages to copy, how many, and the child's base."""
        base, base_length, compacted = await self._offsets(session)
        if base is not None and at < base_length:
            return await self._fork_point(base, at)
        return session, compacted + (at - base_length), session.base_id

    async def _offsets(self, session: SessionInfo) -> tuple[SessionInfo | None, int, int]:
        """The base session, the length of its logical transcript (where this session's own
        messages start in the logical one), and how many compacted messages open this one's."""
        base = await self.get(session.owner, session.base_id) if session.base_id else None
        base_length = len(await self.logical(base)) if base is not None else 0
        own = await self.messages(session.id)
        return base, base_length, sum(1 for stored in own if stored.compacted)


def _info(row: Any) -> SessionInfo:
    return SessionInfo(
        id=row.id,
        owner=row.owner,
        name=row.name,
        profile=row.profile,
        title=row.title,
        system_prompt=row.system_prompt,
        parent_id=row.parent_id,
        origin=row.origin,
        base_id=row.base_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        ended_at=row.ended_at,
        end_reason=row.end_reason,
        usage=Usage(
            input_tokens=row.input_tokens,
            output_tokens=row.output_tokens,
            cache_read_tokens=row.cache_read_tokens,
            cache_write_tokens=row.cache_write_tokens,
            reasoning_tokens=row.reasoning_tokens,
        ),
    )


async def take_turn_lock(
    db: Database,
    owner: str,
    name: str,
    holder: str,
    *,
    lease_seconds: float,
    instance: str | None,
) -> bool:
    """Take conversation ``name``'s turn lock for ``holder`` (a run, or a sweep), unless a
    live holder has it: drop an expired lease, then insert; the primary key refuses a second
    holder on every engine."""
    now = time.time()
    try:
        async with db.engine.begin() as conn:
            await conn.execute(
                delete(LOCKS).where(
                    LOCKS.c.owner == owner, LOCKS.c.name == name, LOCKS.c.lease_until < now
                )
            )
            await conn.execute(
                insert(LOCKS).values(
                    owner=owner,
                    name=name,
                    run_id=holder,
                    lease_until=now + lease_seconds,
                    instance=instance,
                )
            )
    except IntegrityError:
        return False
    return True
