"""Storage seams of the agent-level tools.

The agent only sees these small async interfaces. ``hermes_core.memory_stores`` holds
in-memory implementations (used by tests and library users); the SQL implementations behind
the server live with the persistence layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from hermes_core.messages import Message

MemoryTarget = Literal["memory", "user"]
"""``memory``: the agent's own notes. ``user``: what it knows of the user (profile)."""
TodoStatus = Literal["pending", "in_progress", "completed", "cancelled"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TodoItem:
    id: str
    content: str
    status: TodoStatus = "pending"


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionHit:
    """One past session that matched a search."""

    session_id: str
    title: str
    snippet: str
    """The matching text with a little context around it."""
    messages: list[Message] = field(default_factory=list)
    """Messages around the match."""


class MemoryStore(Protocol):
    """Memory entries per owner (an API key's principal, or an explicit memory scope)."""

    async def load(self, owner: str, target: MemoryTarget) -> list[str]: ...

    async def save(self, owner: str, target: MemoryTarget, entries: list[str]) -> None: ...

    async def snapshot(self, owner: str) -> dict[MemoryTarget, list[str]]:
        """Both targets' entries for a new session's prompt. May be slightly stale (a
        cache): never use it to read-modify-write."""
        ...


class TodoStore(Protocol):
    """The task list of a session."""

    async def load(self, session_id: str) -> list[TodoItem]: ...

    async def save(self, session_id: str, items: list[TodoItem]) -> None: ...


class SessionSearchStore(Protocol):
    """Full-text search over an owner's past sessions."""

    async def search(
        self,
        owner: str,
        query: str,
        *,
        limit: int,
        exclude: str | None = None,
        every_word: bool = True,
    ) -> list[SessionHit]:
        """Sessions of ``owner`` holding every word of ``query``, newest first; ``exclude``
        names a session to leave out (the searching one: it holds the query itself).

        ``every_word=False`` recalls rather than searches: sessions holding any word that
        says what the query is about (:func:`~hermes_core.search_text.topic_terms`), those
        holding the most of them first, then the newest."""
        ...
