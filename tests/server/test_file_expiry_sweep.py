"""Expired uploads swept by two replicas on one database (SQLite, then PostgreSQL): each file's
record and bytes are removed once, and neither replica's sweep fails."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_core.persistence import FileRecord, Store
from server.files.uploads import FileLimits, FileVault
from server.retention.policy import RetentionPolicy
from server.retention.sweeper import Sweeper

LIMITS = FileLimits(max_file_bytes=1024, quota_bytes=10 * 1024, max_files=10)


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[tuple[Store, Store]]:
    """Two replicas' stores on one database."""
    first = await Store.open(database_url, instance="replica-a")
    second = await Store.open(database_url, instance="replica-b", migrate=False)
    yield first, second
    await first.close()
    await second.close()


async def _uploaded(store: Store, vault: FileVault, *, expires_at: float | None) -> FileRecord:
    record = FileRecord(
        id=f"file-{secrets.token_hex(12)}",
        owner="alice",
        filename="a.txt",
        purpose="user_data",
        bytes=3,
        created_at=time.time() - 7200,
        expires_at=expires_at,
    )
    path = vault.path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"abc")
    await store.files.add(record)
    return record


async def test_expired_uploads_swept_by_two_replicas_at_once_are_removed_once(
    replicas: tuple[Store, Store], tmp_path: Path
) -> None:
    first, second = replicas
    vault = FileVault(tmp_path / "files", first, LIMITS)  # the volume the replicas share
    expired = [await _uploaded(first, vault, expires_at=time.time() - 1) for _ in range(3)]
    kept = await _uploaded(first, vault, expires_at=time.time() + 3600)
    sweepers = [
        Sweeper(store, RetentionPolicy, instance=store.runs.instance, file_path=vault.path)
        for store in (first, second)
    ]

    counts = await asyncio.gather(*(s.sweep(wait_seconds=60) for s in sweepers))

    assert sorted(c.get("files", 0) for c in counts if c is not None) == [0, 3]
    assert [p.name for p in (tmp_path / "files").rglob("file-*")] == [kept.id]
    for record in expired:
        assert await second.files.get("alice", record.id) is None
    assert await second.files.get("alice", kept.id) == kept
    # And a sweep again finds nothing to remove.
    assert await sweepers[1].sweep() == {}
