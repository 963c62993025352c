"""In-memory implementations of the storage seams in :mod:`hermes_core.stores`.

They serve tests and library users who need no persistence. Each returns copies of what it
holds, so a caller mutating a loaded list (or a message dict) cannot change the stored state
behind the store's back — the SQL implementations behave the same way by construction.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

from hermes_core.messages import Message
from hermes_core.search_text import query_terms, searchable_text, snippet, topic_terms, words_of
from hermes_core.stores import MemoryTarget, SessionHit, TodoItem

CONTEXT_MESSAGES = 2
"""Messages kept on each side of the matching one in a search hit."""


class InMemoryMemoryStore:
    """Memory entries keyed by owner and target."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, MemoryTarget], list[str]] = {}

    async def load(self, owner: str, target: MemoryTarget) -> list[str]:
        return list(self._entries.get((owner, target), []))

    async def save(self, owner: str, target: MemoryTarget, entries: list[str]) -> None:
        self._entries[(owner, target)] = list(entries)

    async def snapshot(self, owner: str) -> dict[MemoryTarget, list[str]]:
        return {target: await self.load(owner, target) for target in ("memory", "user")}


class InMemoryTodoStore:
    """The task list of each session. Items are frozen, so copying the list is enough."""

    def __init__(self) -> None:
        self._items: dict[str, list[TodoItem]] = {}

    async def load(self, session_id: str) -> list[TodoItem]:
        return list(self._items.get(session_id, []))

    async def save(self, session_id: str, items: list[TodoItem]) -> None:
        self._items[session_id] = list(items)


@dataclass(slots=True)
class _IndexedSession:
    title: str
    messages: list[Message]
    texts: list[str]
    """Searchable text of each message, whitespace collapsed."""
    words: list[frozenset[str]]
    """Lower-cased words of each message."""
    stamp: int
    """Recency: higher was added (or last replaced) later."""


class InMemorySessionIndex:
    """Word search over each owner's past sessions.

    A session matches when every word of the query occurs (case-insensitively, as a whole
    word) somewhere in it — the same AND semantics as a plain SQLite FTS5 query, so moving to
    the SQL index does not change what the model finds. Hits come newest first.
    """

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], _IndexedSession] = {}
        # A counter rather than wall-clock time: two sessions added in the same instant still
        # get a strict order.
        self._clock = itertools.count()

    def add_session(self, owner: str, session_id: str, title: str, messages: list[Message]) -> None:
        """Index a session, replacing an earlier version of it; it becomes the newest."""
        # System prompts are the same in every session (and carry the memory snapshot), so
        # indexing them would make every session match everything.
        kept = [copy.deepcopy(m) for m in messages if m.get("role") != "system"]
        texts = [searchable_text(m) for m in kept]
        self._sessions[(owner, session_id)] = _IndexedSession(
            title=title,
            messages=kept,
            texts=texts,
            words=[words_of(t) for t in texts],
            stamp=next(self._clock),
        )

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
        mine = [(sid, s) for (o, sid), s in self._sessions.items() if o == owner and sid != exclude]
        mine.sort(key=lambda item: item[1].stamp, reverse=True)
        found: list[tuple[int, SessionHit]] = []
        for session_id, session in mine:
            present = set(itertools.chain.from_iterable(session.words))
            held = sum(term in present for term in terms)
            if held == len(terms) or (held and not every_word):
                found.append((held, _match(session_id, session, terms)))
                if every_word and len(found) == limit:
                    break
        found.sort(key=lambda item: -item[0])  # stable: the newest first among equals
        return [hit for _, hit in found[:limit]]


def _match(session_id: str, session: _IndexedSession, terms: list[str]) -> SessionHit:
    # The message holding the most query words is the best anchor; ties go to the earliest.
    best = max(
        range(len(session.words)),
        key=lambda i: (sum(term in session.words[i] for term in terms), -i),
    )
    low, high = max(0, best - CONTEXT_MESSAGES), best + CONTEXT_MESSAGES + 1
    return SessionHit(
        session_id=session_id,
        title=session.title,
        snippet=snippet(session.texts[best], terms),
        messages=[copy.deepcopy(m) for m in session.messages[low:high]],
    )
