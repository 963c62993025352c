"""SQLite's full-text index of messages, brought up to date in batches.

Messages are not indexed as they are inserted (migration 0002 dropped that trigger): a
watermark, ``messages_fts_progress.indexed_through``, says how far the index goes, and one
statement indexes everything after it. Each indexing is a transaction's worth of FTS5 work
(a new index segment, the structure record), which cost a quarter of a run's store CPU when
every commit did it. So appends bring the index up to date at most every
:data:`INDEX_EVERY_SECONDS`, and a search first brings it up to date itself: it always finds
every message written before it. A crash loses nothing; the next indexing catches up.
Messages are never updated; they are deleted only with their sessions (retention, deleting a
conversation, erasing an end user), which first call :meth:`SearchIndex.catch_up` (FTS5 must
be told the old text of what it indexed) and lower the watermark in the deleting transaction
(:data:`LOWER_WATERMARK`).

PostgreSQL keeps its own index (a GIN index on the messages): there, appending does nothing
here and catching up is only waiting for the queued writes.
"""

from __future__ import annotations

import time

from sqlalchemy import text

from hermes_core.persistence.writer import Phase, WriteBehind

INDEX_EVERY_SECONDS = 1.0

_INDEX_NEW_MESSAGES = text(
    "INSERT INTO messages_fts(rowid, search_text) SELECT id, search_text FROM messages "
    "WHERE id > (SELECT indexed_through FROM messages_fts_progress)"
)
_ADVANCE_WATERMARK = text(
    "UPDATE messages_fts_progress SET indexed_through = "
    "coalesce((SELECT max(id) FROM messages), indexed_through)"
)
LOWER_WATERMARK = text(
    "UPDATE messages_fts_progress SET indexed_through = "
    "min(indexed_through, coalesce((SELECT max(id) FROM messages), 0))"
)
"""Run in the transaction that deleted messages: SQLite gives a new row the largest id left
plus one, so once the newest messages are gone their ids come back, and a watermark above
them would keep the new messages out of the index for good."""


class SearchIndex:
    def __init__(
        self,
        writer: WriteBehind,
        *,
        batched: bool,
        every_seconds: float = INDEX_EVERY_SECONDS,
    ) -> None:
        self._writer = writer
        self.batched = batched
        """True on SQLite: this class maintains the index. False where the database does."""
        self._every = every_seconds
        self._next = 0.0
        """When appends may index again (``time.monotonic()``)."""

    def appended(self) -> None:
        """Messages were queued: index them with their commit, unless that happened lately."""
        if not self.batched:
            return
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._every
            self._submit()

    async def catch_up(self) -> None:
        """Index every message queued so far, and wait for it (before a search)."""
        if self.batched:
            self._submit()
        await self._writer.flush()

    def _submit(self) -> None:
        # Phases: after the batch's messages are appended, and the watermark after that.
        self._writer.submit(_INDEX_NEW_MESSAGES, {}, phase=Phase.INDEX)
        self._writer.submit(_ADVANCE_WATERMARK, {}, phase=Phase.UPDATE)
