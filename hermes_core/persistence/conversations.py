"""Conversations (``/v1/conversations``): a row per conversation, its items in a session.

A conversation ``conv_…`` is its key's session *named* by the conversation's id, as any named
session is (``X-Hermes-Session-Id``): its transcript is the conversation's items, its name
keys the workspace, the open approvals and the turn lock. This module keeps the row (owner,
metadata) and the few things the Conversations API does to that session that a turn never
does: start one before any turn (created with items, or items added first), read its
messages with their row ids (an item's id is derived from its row, so it stays the same as
the conversation grows), and remove a message.

Writes are direct, not queued: the API answers once they are durable. The caller holds the
conversation's turn lock around anything that changes its transcript, so no run writes
positions underneath.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, or_, select, update

from hermes_core.ids import token_hex
from hermes_core.persistence.database import Database
from hermes_core.persistence.rows import StoredMessage, message_row, stored_message
from hermes_core.persistence.sessions import new_session_id
from hermes_core.persistence.tables import ConversationRow, MessageRow, ResponseRow, SessionRow

CONVERSATIONS = ConversationRow.__table__  # type: ignore[attr-defined]
SESSIONS = SessionRow.__table__  # type: ignore[attr-defined]
MESSAGES = MessageRow.__table__  # type: ignore[attr-defined]
RESPONSES = ResponseRow.__table__  # type: ignore[attr-defined]
UNBOUND_PROFILE = ""
"""The profile of a session the Conversations API started (before any turn): its first turn
binds it to that turn's profile and frozen prompt."""


def new_conversation_id() -> str:
    return f"conv_{token_hex(24)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationRecord:
    id: str
    owner: str
    metadata: dict[str, str]
    created_at: float
    end_user: str | None = None
    """The end user whose request created it (docs/end-users.md): only requests naming
    them see it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationMessage:
    """A message of a conversation's transcript, with what names it: its row (an item's id
    is derived from it) and where it is stored."""

    row_id: int
    session_id: str
    position: int
    stored: StoredMessage


class ConversationStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- the conversation's row -----------------------------------------------------------------

    async def create(
        self, owner: str, metadata: dict[str, str], *, end_user: str | None = None
    ) -> ConversationRecord:
        record = ConversationRecord(
            id=new_conversation_id(),
            owner=owner,
            metadata=dict(metadata),
            created_at=time.time(),
            end_user=end_user,
        )
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(CONVERSATIONS).values(
                    id=record.id,
                    owner=owner,
                    metadata=record.metadata,
                    created_at=record.created_at,
                    end_user=end_user,
                )
            )
        return record

    async def get(self, owner: str, conversation_id: str) -> ConversationRecord | None:
        statement = select(CONVERSATIONS).where(
            CONVERSATIONS.c.id == conversation_id, CONVERSATIONS.c.owner == owner
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _record(row) if row is not None else None

    async def update(
        self, owner: str, conversation_id: str, metadata: dict[str, str]
    ) -> ConversationRecord | None:
        """Replace the conversation's metadata (as OpenAI's update does); None: no such."""
        statement = (
            update(CONVERSATIONS)
            .where(CONVERSATIONS.c.id == conversation_id, CONVERSATIONS.c.owner == owner)
            .values(metadata=dict(metadata))
        )
        async with self.db.engine.begin() as conn:
            if not (await conn.execute(statement)).rowcount:
                return None
        return await self.get(owner, conversation_id)

    async def delete(self, owner: str, conversation_id: str) -> bool:
        """Delete the conversation and every session named by it of ``owner`` (and of its
        memory scopes, ``owner/…``), messages included; False: no such conversation."""
        await self.db.search_index.catch_up()  # FTS5 must have indexed what it is to forget
        async with self.db.engine.begin() as conn:
            deleted = await conn.execute(
                delete(CONVERSATIONS).where(
                    CONVERSATIONS.c.id == conversation_id, CONVERSATIONS.c.owner == owner
                )
            )
            if not deleted.rowcount:
                return False
            sessions = select(SESSIONS.c.id).where(
                SESSIONS.c.name == conversation_id,
                or_(SESSIONS.c.owner == owner, SESSIONS.c.owner.startswith(f"{owner}/")),
            )
            # Children first is not needed: sessions refer to each other by plain columns.
            await conn.execute(delete(MESSAGES).where(MESSAGES.c.session_id.in_(sessions)))
            await conn.execute(delete(SESSIONS).where(SESSIONS.c.id.in_(sessions)))
        return True

    # --- its session ----------------------------------------------------------------------------

    async def session_owners(self, owner: str, conversation_id: str) -> list[str]:
        """Who owns the conversation's sessions: the key, and each memory scope of it
        (``owner/…``) that took a turn in it."""
        statement = (
            select(SESSIONS.c.owner)
            .where(
                SESSIONS.c.name == conversation_id,
                or_(SESSIONS.c.owner == owner, SESSIONS.c.owner.startswith(f"{owner}/")),
            )
            .distinct()
        )
        await self.db.writer.flush()
        async with self.db.engine.connect() as conn:
            return [row.owner for row in await conn.execute(statement)]

    async def session(self, owner: str, conversation_id: str) -> str | None:
        """The session holding the conversation now (its newest live branch), if any.
        ``owner``: the session's owner (the key, or a memory scope of it)."""
        statement = (
            select(SESSIONS.c.id)
            .where(
                SESSIONS.c.owner == owner,
                SESSIONS.c.name == conversation_id,
                or_(SESSIONS.c.end_reason.is_(None), SESSIONS.c.end_reason != "compression"),
            )
            .order_by(SESSIONS.c.updated_at.desc())
            .limit(1)
        )
        await self.db.writer.flush()
        async with self.db.engine.connect() as conn:
            return (await conn.execute(statement)).scalar()

    async def start_session(self, owner: str, conversation_id: str) -> str:
        """A session for the conversation before any turn: unbound (no profile, no prompt)
        until its first turn binds it (see :meth:`bind`)."""
        session_id = new_session_id()
        now = time.time()
        async with self.db.engine.begin() as conn:
            await conn.execute(
                insert(SESSIONS).values(
                    id=session_id,
                    owner=owner,
                    name=conversation_id,
                    profile=UNBOUND_PROFILE,
                    title="",
                    system_prompt="",
                    created_at=now,
                    updated_at=now,
                )
            )
        return session_id

    async def bind(self, session_id: str, profile: str, system_prompt: str) -> None:
        """Give an unbound session its first turn's profile and frozen prompt."""
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(SESSIONS)
                .where(SESSIONS.c.id == session_id, SESSIONS.c.profile == UNBOUND_PROFILE)
                .values(profile=profile, system_prompt=system_prompt)
            )

    async def append(self, session_id: str, messages: Sequence[StoredMessage]) -> int:
        """Add ``messages`` at the end of the session; returns the position of the first."""
        await self.db.writer.flush()
        now = time.time()
        async with self.db.engine.begin() as conn:
            count = (
                await conn.execute(select(func.count()).where(MESSAGES.c.session_id == session_id))
            ).scalar_one()
            if messages:
                await conn.execute(
                    insert(MESSAGES),
                    [
                        message_row(session_id, count + offset, stored, now=now)
                        for offset, stored in enumerate(messages)
                    ],
                )
                await conn.execute(
                    update(SESSIONS).where(SESSIONS.c.id == session_id).values(updated_at=now)
                )
        if messages:
            self.db.search_index.appended()
        return int(count)

    async def messages(self, session_id: str) -> list[ConversationMessage]:
        """The whole conversation as it happened, ending with ``session_id``'s messages: a
        compression child's base sessions first, compacted copies left out (as a session's
        logical transcript is read)."""
        await self.db.writer.flush()
        chain: list[str] = []
        current: str | None = session_id
        async with self.db.engine.connect() as conn:
            while current is not None and current not in chain:
                chain.append(current)
                current = (
                    await conn.execute(select(SESSIONS.c.base_id).where(SESSIONS.c.id == current))
                ).scalar()
            found: list[ConversationMessage] = []
            for held in reversed(chain):
                rows = await conn.execute(
                    select(MESSAGES)
                    .where(MESSAGES.c.session_id == held, MESSAGES.c.compacted.is_(False))
                    .order_by(MESSAGES.c.position)
                )
                found.extend(
                    ConversationMessage(
                        row_id=row.id,
                        session_id=held,
                        position=row.position,
                        stored=stored_message(row),
                    )
                    for row in rows
                )
        return found

    async def remove(self, session_id: str, positions: Sequence[int]) -> None:
        """Remove the messages at ``positions`` of a session; the later ones move up, so the
        transcript stays contiguous (a run's messages are written at their index in it), and
        so do the ends of the session's stored responses past them (see below)."""
        gone = sorted(set(positions))
        if not gone:
            return
        await self.db.search_index.catch_up()  # FTS5 must have indexed what it is to forget
        await self.db.writer.flush()  # a response saved before is moved with the rest
        async with self.db.engine.begin() as conn:
            where = MESSAGES.c.session_id == session_id
            await conn.execute(delete(MESSAGES).where(where, MESSAGES.c.position.in_(gone)))
            later = (
                await conn.execute(
                    select(MESSAGES.c.id, MESSAGES.c.position)
                    .where(where, MESSAGES.c.position > gone[0])
                    .order_by(MESSAGES.c.position)
                )
            ).all()
            # Out of the way first (negative positions), so no step meets a taken position.
            await conn.execute(
                update(MESSAGES)
                .where(where, MESSAGES.c.position > gone[0])
                .values(position=-MESSAGES.c.position - 1)
            )
            for row in later:
                moved = row.position - sum(1 for position in gone if position < row.position)
                await conn.execute(
                    update(MESSAGES).where(MESSAGES.c.id == row.id).values(position=moved)
                )
            # A stored response ends at a position of the session (``transcript_length``, what
            # ``previous_response_id`` continues from): one past a removed message now ends a
            # message earlier, or continuing it would take a message that came after it. From
            # the last removed position down, so each step compares with unmoved positions.
            ends = RESPONSES.c.transcript_length
            for position in reversed(gone):
                await conn.execute(
                    update(RESPONSES)
                    .where(RESPONSES.c.session_id == session_id, ends > position)
                    .values(transcript_length=ends - 1)
                )


def _record(row: Any) -> ConversationRecord:
    return ConversationRecord(
        id=row.id,
        owner=row.owner,
        metadata=dict(row.metadata or {}),
        created_at=row.created_at,
        end_user=row.end_user,
    )
