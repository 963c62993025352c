"""The write queue on a full disk: what the disk refuses is kept, in order, and committed once
space is freed; nobody waiting for durability hangs meanwhile."""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from hermes_core.persistence.committers import SqliteCommitter
from hermes_core.persistence.disk_full import StorageFull, disk_full
from hermes_core.persistence.writer import Phase, Write, WriteBehind, WritesHeld

_WRITE = text("INSERT INTO t VALUES (:x)")
FAST_RETRY = (0.01, 0.05)


class _Disk:
    """A committer whose disk is full until :meth:`free` (it refuses the first write then)."""

    def __init__(self) -> None:
        self.full = False
        self.committed: list[object] = []

    def free(self) -> None:
        self.full = False

    async def commit(self, writes: list[Write]) -> int:
        if self.full:
            raise WritesHeld(writes, 0)
        self.committed.extend(params["x"] for _statement, params, _phase in writes)
        return 0

    async def close(self) -> None:
        return None


async def test_writes_the_full_disk_refused_are_committed_in_order_once_it_has_space() -> None:
    disk = _Disk()
    writer = WriteBehind(disk, gather_seconds=0, retry_seconds=FAST_RETRY)
    disk.full = True
    for x in (1, 2):
        writer.submit(_WRITE, {"x": x}, phase=Phase.APPEND)
    with pytest.raises(StorageFull):
        await asyncio.wait_for(writer.flush(), timeout=5)
    writer.submit(_WRITE, {"x": 3}, phase=Phase.APPEND)  # queued behind the refused ones
    assert writer.waiting_for_space == 3
    disk.free()
    await asyncio.wait_for(_until(lambda: writer.waiting_for_space == 0), timeout=5)
    assert disk.committed == [1, 2, 3]
    assert writer.failures == 0


async def test_a_flush_on_a_full_disk_raises_at_once_and_retries_without_waiting() -> None:
    disk = _Disk()
    # A backoff longer than the test: only the flushes themselves can try again.
    writer = WriteBehind(disk, gather_seconds=0, retry_seconds=(60, 60))
    disk.full = True
    writer.submit(_WRITE, {"x": 1}, phase=Phase.RELEASE)
    with pytest.raises(StorageFull) as raised:
        await asyncio.wait_for(writer.flush(), timeout=5)
    assert raised.value.errno == errno.ENOSPC  # a full disk wherever it is reported
    disk.free()
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert disk.committed == [1]


async def test_writes_beyond_the_bound_are_lost_and_counted_while_the_disk_is_full(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = _Disk()
    writer = WriteBehind(disk, gather_seconds=0, retry_seconds=(60, 60), max_waiting=2)
    disk.full = True
    writer.submit(_WRITE, {"x": 1}, phase=Phase.APPEND)
    with pytest.raises(StorageFull):
        await writer.flush()
    with caplog.at_level(logging.ERROR, logger="hermes_core.persistence.writer"):
        for x in (2, 3, 4):
            writer.submit(_WRITE, {"x": x}, phase=Phase.APPEND)
    assert writer.failures == 2
    assert "further writes are lost" in caplog.text
    disk.free()
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert disk.committed == [1, 2]


async def test_closing_on_a_full_disk_says_what_was_lost_and_does_not_hang(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = _Disk()
    writer = WriteBehind(disk, gather_seconds=0, retry_seconds=FAST_RETRY)
    disk.full = True
    writer.submit(_WRITE, {"x": 1}, phase=Phase.APPEND)
    writer.submit(_WRITE, {"x": 2}, phase=Phase.APPEND)
    with caplog.at_level(logging.ERROR, logger="hermes_core.persistence.writer"):
        await asyncio.wait_for(writer.close(), timeout=5)
    assert "2 writes are lost" in caplog.text
    assert writer.failures == 2
    assert writer.waiting_for_space == 0


# --- a real SQLite file whose room runs out --------------------------------------------------


async def test_sqlite_keeps_what_did_not_fit_and_commits_it_once_rows_are_deleted(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "small.db")
    with sqlite3.connect(path) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE t (x TEXT)")
        setup.execute("INSERT INTO t VALUES (?)", ("filler" * 50_000,))
        pages = setup.execute("PRAGMA page_count").fetchone()[0]

    def no_room_to_grow(connection: sqlite3.Connection) -> None:
        # SQLite's own "database or disk is full", without filling a real disk.
        connection.execute(f"PRAGMA max_page_count = {pages}")

    writer = WriteBehind(
        SqliteCommitter(path, setup=no_room_to_grow), gather_seconds=0, retry_seconds=FAST_RETRY
    )
    try:
        writer.submit(_WRITE, {"x": "small"}, phase=Phase.APPEND)
        writer.submit(_WRITE, {"x": "big" * 50_000}, phase=Phase.APPEND)
        writer.submit(_WRITE, {"x": "after"}, phase=Phase.RELEASE)
        with pytest.raises(StorageFull):
            await asyncio.wait_for(writer.flush(), timeout=10)
        with sqlite3.connect(path) as other:
            other.execute("DELETE FROM t WHERE x LIKE 'filler%'")
        await asyncio.wait_for(_until(lambda: writer.waiting_for_space == 0), timeout=10)
        assert writer.failures == 0
    finally:
        await writer.close()
    with sqlite3.connect(path) as check:
        rows = [row[0][:5] for row in check.execute("SELECT x FROM t ORDER BY rowid")]
    assert rows == ["small", "bigbi", "after"]


def test_a_full_disk_is_recognised_however_the_driver_reports_it() -> None:
    sqlite_full = sqlite3.OperationalError("database or disk is full")
    assert disk_full(sqlite_full)
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert disk_full(OperationalError("INSERT", {}, sqlite_full))
    assert not disk_full(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert not disk_full(OSError(errno.EACCES, "Permission denied"))


async def _until(condition: Callable[[], bool]) -> None:
    """Poll ``condition`` (the caller bounds the wait)."""
    while True:
        if condition():
            return
        await asyncio.sleep(0.01)
