"""Uploaded files' records: whose each file is, what it is called, how big it is, and when it
expires (if it does).

Writes are direct, not queued with a run's writes: an upload is answered only once its record
is durable, and the quota a key is held to counts what is committed. A file past its
``expires_at`` is gone for its owner at once (not found, not listed, not counted), though its
record and bytes stay until the retention sweeper removes them (:meth:`FileStore.expire`).
"""

from __future__ import annotations

import builtins
import hashlib
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.sql import ColumnElement

from hermes_core.persistence.database import Database
from hermes_core.persistence.tables import FileRow

FILES = FileRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True, kw_only=True)
class FileRecord:
    id: str
    owner: str
    filename: str
    purpose: str
    bytes: int
    created_at: float
    end_user: str | None = None
    """The end user who uploaded it (only requests naming them see it), if any."""
    expires_at: float | None = None
    """When it expires (UNIX time; its upload's ``expires_after``); None: kept until deleted."""


@dataclass(frozen=True, slots=True)
class FileUsage:
    """What one owner's files take up."""

    bytes: int
    count: int


EXPIRED_BATCH = 500
"""Expired files' records removed per transaction (a sweep takes as many as there are)."""


class FileStore:
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        """The time (UNIX) files expire by."""

    def _live(self) -> Any:
        """Files not expired now."""
        return FILES.c.expires_at.is_(None) | (FILES.c.expires_at > self.clock())

    async def add(self, record: FileRecord) -> None:
        values = {name: getattr(record, name) for name in _FIELDS}
        async with self.db.engine.begin() as conn:
            await conn.execute(insert(FILES), values)

    async def add_within(
        self, record: FileRecord, *, max_files: int, quota_bytes: int
    ) -> FileUsage:
        """Add ``record`` if its owner's files, with it, stay within ``max_files`` and
        ``quota_bytes``; what the owner's files took before, whether it was added or not.

        Counting and inserting are one transaction; on PostgreSQL it first takes an advisory
        lock of the owner, held until it commits, so uploads of one key on several replicas
        are checked one after another. (SQLite serves one process: its caller's lock is it.)
        """
        values = {name: getattr(record, name) for name in _FIELDS}
        async with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                await conn.execute(select(func.pg_advisory_xact_lock(_lock_key(record.owner))))
            total, count = (await conn.execute(self._usage(record.owner))).one()
            usage = FileUsage(int(total), int(count))
            if usage.count + 1 <= max_files and usage.bytes + record.bytes <= quota_bytes:
                await conn.execute(insert(FILES), values)
        return usage

    async def get(self, owner: str, file_id: str) -> FileRecord | None:
        mine = (FILES.c.id == file_id) & (FILES.c.owner == owner)
        statement = select(FILES).where(mine & self._live())
        async with self.db.engine.connect() as conn:
            row = (await conn.execute(statement)).first()
        return file_record(row) if row is not None else None

    async def list(
        self,
        owner: str,
        *,
        purpose: str | None = None,
        after: FileRecord | None = None,
        limit: int = 100,
        newest_first: bool = True,
        visible_to: str | None = None,
    ) -> list[FileRecord]:
        """``owner``'s unexpired files, newest first (or oldest), from just past ``after``,
        that its end user ``visible_to`` sees: the key's own, and theirs (None: the key's own
        only)."""
        where: Any = (FILES.c.owner == owner) & self._live()
        mine = FILES.c.end_user.is_(None)
        where = where & (mine if visible_to is None else mine | (FILES.c.end_user == visible_to))
        if purpose is not None:
            where = where & (FILES.c.purpose == purpose)
        if after is not None:
            at, last = FILES.c.created_at, FILES.c.id
            if newest_first:
                past = (at < after.created_at) | ((at == after.created_at) & (last < after.id))
            else:
                past = (at > after.created_at) | ((at == after.created_at) & (last > after.id))
            where = where & past
        order = (FILES.c.created_at, FILES.c.id)
        ordering = [c.desc() if newest_first else c.asc() for c in order]
        statement = select(FILES).where(where).order_by(*ordering).limit(limit)
        async with self.db.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [file_record(row) for row in rows]

    async def delete(self, owner: str, file_id: str) -> bool:
        statement = delete(FILES).where((FILES.c.id == file_id) & (FILES.c.owner == owner))
        async with self.db.engine.begin() as conn:
            result = await conn.execute(statement)
        return bool(result.rowcount)

    async def usage(self, owner: str) -> FileUsage:
        async with self.db.engine.connect() as conn:
            total, count = (await conn.execute(self._usage(owner))).one()
        return FileUsage(int(total), int(count))

    def expire(self) -> AsyncGenerator[builtins.list[FileRecord], None]:
        """Delete the records of files expired now, in batches; yields each batch's records,
        whose bytes the caller removes."""
        return delete_files(self.db, FILES.c.expires_at <= self.clock(), EXPIRED_BATCH)

    def _usage(self, owner: str) -> Any:
        """What ``owner``'s files take up: an expired file takes nothing of the quota (its
        bytes are on disk until the next sweep, a bounded while)."""
        return select(func.coalesce(func.sum(FILES.c.bytes), 0), func.count()).where(
            (FILES.c.owner == owner) & self._live()
        )


_FIELDS = tuple(column.name for column in FILES.columns)


def _lock_key(owner: str) -> int:
    """The advisory lock of ``owner``'s files: 64 bits of a hash, in a namespace of its own
    (so it does not meet another lock of this database)."""
    digest = hashlib.sha256(b"hermes files quota\0" + owner.encode("utf-8", "surrogatepass"))
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


async def delete_files(
    db: Database, where: ColumnElement[bool], batch: int
) -> AsyncGenerator[list[FileRecord], None]:
    """Delete the records of the files ``where`` selects, ``batch`` at a time; yields the
    records each batch removed, whose bytes the caller removes. A record is yielded by the one
    deletion that removed it: another replica sweeping at once (one that lost the sweep's
    lease) may select the same records and delete some first, and bytes must be removed, and
    counted, once."""
    while True:
        async with db.engine.begin() as conn:
            statement = select(FILES.c.id).where(where).limit(batch)
            ids = list((await conn.execute(statement)).scalars())
            if not ids:
                return
            removing = delete(FILES).where(FILES.c.id.in_(ids)).returning(*FILES.c)
            removed = (await conn.execute(removing)).all()
        if removed:
            yield [file_record(row) for row in removed]
        if len(ids) < batch:
            return


def file_record(row: Any) -> FileRecord:
    return FileRecord(**{name: getattr(row, name) for name in _FIELDS})
