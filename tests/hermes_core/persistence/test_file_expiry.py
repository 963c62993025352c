"""Files with an ``expires_at`` (OpenAI's ``expires_after``), in the store, on SQLite and on
PostgreSQL: an expired file takes nothing of its key's quota, its records are removed once
however many replicas sweep at once, and migration 0014 keeps the files there were."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import text

from hermes_core.persistence import FileRecord, FileUsage, Store
from hermes_core.persistence.database import SCHEMA_HEAD
from hermes_core.persistence.files import EXPIRED_BATCH, FILES, FileStore
from tests.hermes_core.persistence.helpers import uploaded
from tests.hermes_core.persistence.migrating import schema_differences, to_revision

NOW = 1_800_000_000.0


def _at(store: Store, now: float) -> FileStore:
    """``store``'s files as they are at ``now``."""
    return FileStore(store.db, clock=lambda: now)


async def _expired_ids(files: FileStore) -> list[str]:
    """The ids of the records ``files.expire()`` says it removed, in one sweep."""
    return [record.id async for batch in files.expire() for record in batch]


async def test_an_expired_file_takes_nothing_of_its_keys_quota(store: Store) -> None:
    files = _at(store, NOW)
    await files.add(uploaded("dora", 90, expires_at=NOW - 1))
    await files.add(uploaded("dora", 5, expires_at=NOW + 3600))

    assert await files.usage("dora") == FileUsage(5, 1)
    before = await files.add_within(uploaded("dora", 95), max_files=2, quota_bytes=100)
    assert (before.count, before.bytes) == (1, 5)
    assert (await files.usage("dora")).bytes == 100
    # An hour on, the other one has expired too.
    assert (await _at(store, NOW + 3600).usage("dora")).bytes == 95


async def test_expired_files_are_removed_once_by_two_sweeps_one_after_another(
    store: Store,
) -> None:
    files = _at(store, NOW)
    expired = [uploaded("erin", 1, expires_at=NOW - n) for n in range(1, 4)]
    for record in [*expired, uploaded("erin", 1, expires_at=NOW + 1), uploaded("erin", 1)]:
        await files.add(record)

    assert sorted(await _expired_ids(files)) == sorted(r.id for r in expired)
    assert await _expired_ids(files) == []
    assert (await files.usage("erin")).count == 2


async def test_expired_files_swept_by_two_replicas_at_once_are_each_removed_once(
    store: Store, other: Store, database_url: str
) -> None:
    if not database_url.startswith("postgresql"):
        pytest.skip("replicas share a PostgreSQL only")
    for round_ in range(3):
        records = [
            uploaded(f"fay-{round_}", 1, expires_at=NOW - 1) for _ in range(EXPIRED_BATCH + 20)
        ]
        async with store.db.engine.begin() as conn:
            await conn.execute(FILES.insert(), [_values(r) for r in records])
        mine, theirs = await asyncio.gather(
            _expired_ids(_at(store, NOW)), _expired_ids(_at(other, NOW))
        )

        assert sorted(mine + theirs) == sorted(r.id for r in records), round_


def _values(record: FileRecord) -> dict[str, Any]:
    return {column.name: getattr(record, column.name) for column in FILES.columns}


async def test_files_uploaded_before_the_expiry_migration_are_kept_and_never_expire(
    store: Store,
) -> None:
    async with store.db.engine.begin() as conn:
        await conn.run_sync(to_revision("0013"))
        await conn.execute(
            text(
                "INSERT INTO files (id, owner, end_user, filename, purpose, bytes, created_at) "
                "VALUES ('file-old', 'gus', NULL, 'old.txt', 'user_data', 7, 1.5)"
            )
        )
        await conn.run_sync(to_revision("head", up=True))

    assert await store.db.current_revision() == SCHEMA_HEAD
    old = await store.files.get("gus", "file-old")
    assert old is not None
    assert (old.bytes, old.expires_at) == (7, None)
    assert await _expired_ids(_at(store, time.time() + 10 * 365 * 86400)) == []
    async with store.db.engine.connect() as conn:
        assert await conn.run_sync(schema_differences) == []


async def test_the_expiry_migration_downgrades_keeping_the_files_there_are(store: Store) -> None:
    await store.files.add(uploaded("hal", 3, expires_at=NOW + 3600))
    async with store.db.engine.begin() as conn:
        await conn.run_sync(to_revision("0013"))
        rows = (await conn.execute(text("SELECT owner, bytes FROM files"))).all()
        await conn.run_sync(to_revision("head", up=True))

    assert [tuple(row) for row in rows] == [("hal", 3)]
    assert (await store.files.usage("hal")).count == 1
