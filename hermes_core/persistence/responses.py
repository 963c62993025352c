"""Stored Responses API objects: what ``previous_response_id``, retrieval and
``input_items`` read. Retention is by count and/or age, pruned in the background of writes."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.sql import Executable

from hermes_core.persistence.database import Database
from hermes_core.persistence.rows import upsert
from hermes_core.persistence.tables import ResponseRow
from hermes_core.persistence.writer import Phase

RESPONSES = ResponseRow.__table__  # type: ignore[attr-defined]
_COLUMNS = tuple(column.name for column in RESPONSES.columns)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResponse:
    id: str
    owner: str
    session_id: str | None
    previous_id: str | None
    run_id: str | None
    status: str
    request: dict[str, Any]
    body: dict[str, Any]
    transcript_length: int
    created_at: float
    updated_at: float
    end_user: str | None = None
    """The end user it answered (docs/end-users.md): only requests naming them see it."""


class ResponseStore:
    def __init__(
        self, db: Database, *, max_count: int | None = None, max_age_seconds: float | None = None
    ) -> None:
        self.db = db
        self.max_count = max_count
        self.max_age_seconds = max_age_seconds
        self._save: Executable | None = None
        """The upsert, built once for the engine's dialect (the writer compiles it once)."""

    def save(self, response: StoredResponse) -> None:
        """Insert or replace (queued: a response is saved as it changes status)."""
        if self._save is None:
            self._save = upsert(self.db.dialect, RESPONSES, _COLUMNS, keys=("id",))
        values = {
            "id": response.id,
            "owner": response.owner,
            "session_id": response.session_id,
            "previous_id": response.previous_id,
            "run_id": response.run_id,
            "status": response.status,
            "request": response.request,
            "body": response.body,
            "transcript_length": response.transcript_length,
            "created_at": response.created_at,
            "updated_at": response.updated_at,
            "end_user": response.end_user,
        }
        self.db.writer.submit(self._save, values, phase=Phase.UPDATE)

    async def get(self, owner: str, response_id: str) -> StoredResponse | None:
        await self.db.writer.flush()
        statement = select(RESPONSES).where(
            RESPONSES.c.id == response_id, RESPONSES.c.owner == owner
        )
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return _response(row) if row is not None else None

    async def delete(self, owner: str, response_id: str) -> bool:
        await self.db.writer.flush()
        statement = delete(RESPONSES).where(
            RESPONSES.c.id == response_id, RESPONSES.c.owner == owner
        )
        async with self.db.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def fail_unfinished(
        self,
        run_ids: list[str],
        message: str,
        ends: Mapping[str, tuple[str, int]] | None = None,
    ) -> int:
        """Mark the responses of these (dead) runs that never ended as ``failed``. ``ends``:
        by run, the session it was writing to and how many messages that holds now: where the
        response ended, so a ``previous_response_id`` continues from there (saved as it began,
        it says it ended at position 0, and continuing it would fork the chain away)."""
        if not run_ids:
            return 0
        await self.db.writer.flush()
        unfinished = RESPONSES.c.run_id.in_(run_ids) & RESPONSES.c.status.in_(
            ("queued", "in_progress")
        )
        async with self.db.engine.begin() as conn:
            rows = (await conn.execute(select(RESPONSES).where(unfinished))).all()
            for row in rows:
                body = dict(row.body or {})
                body["status"] = "failed"
                body["error"] = {"code": "server_error", "message": message}
                session_id, length = (ends or {}).get(
                    row.run_id, (row.session_id, row.transcript_length)
                )
                await conn.execute(
                    update(RESPONSES)
                    .where(RESPONSES.c.id == row.id)
                    .values(
                        status="failed",
                        body=body,
                        session_id=session_id,
                        transcript_length=length,
                        updated_at=time.time(),
                    )
                )
        return len(rows)

    async def prune(self) -> int:
        """Forget responses beyond the retention limits; returns how many."""
        await self.db.writer.flush()
        removed = 0
        async with self.db.engine.begin() as conn:
            if self.max_age_seconds is not None:
                cutoff = time.time() - self.max_age_seconds
                result = await conn.execute(
                    delete(RESPONSES).where(RESPONSES.c.created_at < cutoff)
                )
                removed += result.rowcount
            if self.max_count is not None and self.max_count <= 0:
                removed += (await conn.execute(delete(RESPONSES))).rowcount
            elif self.max_count is not None:
                # The created_at of the oldest response within the limit: older ones go (a tie
                # on that instant keeps a few more than the limit, never fewer).
                oldest_kept = await conn.scalar(
                    select(RESPONSES.c.created_at)
                    .order_by(RESPONSES.c.created_at.desc())
                    .offset(self.max_count - 1)
                    .limit(1)
                )
                if oldest_kept is not None:
                    result = await conn.execute(
                        delete(RESPONSES).where(RESPONSES.c.created_at < oldest_kept)
                    )
                    removed += result.rowcount
        return removed


def _response(row: Any) -> StoredResponse:
    return StoredResponse(
        id=row.id,
        owner=row.owner,
        session_id=row.session_id,
        previous_id=row.previous_id,
        run_id=row.run_id,
        status=row.status,
        request=row.request or {},
        body=row.body or {},
        transcript_length=row.transcript_length,
        created_at=row.created_at,
        updated_at=row.updated_at,
        end_user=row.end_user,
    )
