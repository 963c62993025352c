"""``session_search`` over SQL: the engine's full-text index finds candidate messages, then the
same rules as the in-memory index pick the sessions (every query word somewhere in the
session, newest first) and the snippet.

The index does the expensive part (which of many messages mention any of the words); the
final decision is made here in Python so that SQLite FTS5, PostgreSQL and the in-memory index
agree on what matches.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import and_, column, func, literal_column, or_, select, table, true
from sqlalchemy.sql import Select
from sqlalchemy.sql.expression import ColumnClause

from hermes_core.persistence.database import Database
from hermes_core.persistence.rows import stored_message
from hermes_core.persistence.sessions import MESSAGES, SESSIONS
from hermes_core.search_text import query_terms, snippet, topic_terms, words_of
from hermes_core.stores import SessionHit

CONTEXT_MESSAGES = 2
"""Messages kept on each side of the matching one in a hit."""
MAX_CANDIDATES = 2000
"""Matching messages considered per search (the newest sessions' first)."""
PG_VECTOR = "to_tsvector('simple', regexp_replace(messages.search_text, '[[:punct:]]+', ' ', 'g'))"
"""The words PostgreSQL indexes: exactly the expression of the index ``ix_messages_search``
(migration 0001), constants inline, so that the planner uses it. Punctuation is blanked
because PostgreSQL's parser keeps paths, URLs, e-mail addresses and dotted numbers as single
tokens, where ``\\w+`` (the in-memory index, SQLite's unicode61) sees their words. Outside
ASCII, punctuation and case follow the database's ``LC_CTYPE``: under the C locale, ``’`` or
``—`` do not split words and ``É`` does not fold to ``é`` (a UTF-8 locale has neither gap)."""


class SqlSessionSearch:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def search(
        self,
        owner: str,
        query: str,
        *,
        limit: int,
        exclude: str | None = None,
        every_word: bool = True,
    ) -> list[SessionHit]:
        terms = query_terms(query) if every_word else topic_terms(query)
        if not terms or limit <= 0:
            return []
        await self.db.search_index.catch_up()  # the session just written must be findable
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(self._candidates(owner, terms, exclude))).all()
            hits = _rank(rows, terms, limit, every_word=every_word)
            return [await self._hit(conn, hit, terms) for hit in hits]

    def _candidates(self, owner: str, terms: list[str], exclude: str | None) -> Select[Any]:
        columns = (
            MESSAGES.c.session_id,
            MESSAGES.c.position,
            MESSAGES.c.search_text,
            SESSIONS.c.title,
            SESSIONS.c.updated_at,
        )
        joined = MESSAGES.join(SESSIONS, SESSIONS.c.id == MESSAGES.c.session_id)
        if self.db.dialect == "sqlite":
            fts = table("messages_fts", column("rowid"))
            match = " OR ".join('"' + term.replace('"', "") + '"' for term in terms)
            statement = (
                select(*columns)
                .select_from(joined)
                .where(
                    MESSAGES.c.id.in_(
                        select(fts.c.rowid).where(literal_column("messages_fts").op("MATCH")(match))
                    )
                )
            )
        else:
            vector: ColumnClause[Any] = literal_column(PG_VECTOR)
            statement = (
                select(*columns)
                .select_from(joined)
                .where(or_(*(vector.op("@@")(func.plainto_tsquery("simple", t)) for t in terms)))
            )
        return (
            statement.where(
                SESSIONS.c.owner == owner,
                MESSAGES.c.compacted.is_(False),
                SESSIONS.c.id != exclude if exclude is not None else true(),
            )
            .order_by(SESSIONS.c.updated_at.desc(), MESSAGES.c.position)
            .limit(MAX_CANDIDATES)
        )

    async def _hit(self, conn: Any, hit: _Hit, terms: list[str]) -> SessionHit:
        low, high = hit.position - CONTEXT_MESSAGES, hit.position + CONTEXT_MESSAGES
        statement = (
            select(MESSAGES)
            .where(
                and_(
                    MESSAGES.c.session_id == hit.session_id,
                    MESSAGES.c.position.between(low, high),
                    MESSAGES.c.compacted.is_(False),
                )
            )
            .order_by(MESSAGES.c.position)
        )
        rows = (await conn.execute(statement)).all()
        return SessionHit(
            session_id=hit.session_id,
            title=hit.title,
            snippet=snippet(hit.text, terms),
            messages=[stored_message(row).message for row in rows],
        )


class _Hit:
    __slots__ = ("position", "session_id", "text", "title")

    def __init__(self, session_id: str, title: str, position: int, text: str) -> None:
        self.session_id = session_id
        self.title = title
        self.position = position
        self.text = text


def _rank(rows: list[Any], terms: list[str], limit: int, *, every_word: bool) -> list[_Hit]:
    """Sessions (in the rows' recency order) holding every term — or, not ``every_word``,
    any, those holding the most first; each anchored at the message with the most terms (the
    earliest on a tie)."""
    by_session: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_session[row.session_id].append(row)
    found: list[tuple[int, _Hit]] = []
    for session_id, messages in by_session.items():  # dicts keep the rows' order
        words = [words_of(row.search_text) for row in messages]
        held = sum(any(term in w for w in words) for term in terms)
        if held < len(terms) and (every_word or not held):
            continue
        best = max(range(len(messages)), key=lambda i: (sum(t in words[i] for t in terms), -i))
        anchor = messages[best]
        found.append((held, _Hit(session_id, anchor.title, anchor.position, anchor.search_text)))
        if every_word and len(found) == limit:
            break
    found.sort(key=lambda item: -item[0])  # stable: the newest first among equals
    return [hit for _, hit in found[:limit]]
