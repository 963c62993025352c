"""The write queue: writes from every run share transactions, and one bad write loses nothing
else."""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import JSON, func, null, select, text
from sqlalchemy.dialects.sqlite.pysqlite import dialect as sqlite_dialect

from hermes_core import json_codec
from hermes_core.persistence import Store
from hermes_core.persistence.committers import (
    SqliteCommitter,
    _bind_processor,
    _JobThread,
    grouped,
)
from hermes_core.persistence.sessions import MESSAGES, SESSIONS
from hermes_core.persistence.writer import Phase, Write, WriteBehind
from hermes_core.usage import Usage
from tests.hermes_core.persistence.helpers import assistant, stored, user

TASKS = 20
TURNS = 3


async def _count(store: Store, table_name: str) -> int:
    table = {"sessions": SESSIONS, "messages": MESSAGES}[table_name]
    async with store.db.engine.connect() as conn:
        return int(await conn.scalar(select(func.count()).select_from(table)) or 0)


async def test_writes_queued_by_many_tasks_are_all_committed(store: Store) -> None:
    async def converse(task: int) -> None:
        session_id = store.sessions.create(owner=f"owner_{task}", profile="p", system_prompt="s")
        for turn in range(TURNS):
            store.sessions.add_messages(
                session_id, 2 * turn, stored(user(f"q{task}.{turn}"), assistant("a"))
            )
            await asyncio.sleep(0)  # let the other tasks (and the commit loop) interleave
        # What a task has queued is committed once its own flush returns, whatever the
        # others are doing.
        await store.db.writer.flush()
        messages = await store.sessions.messages(session_id)
        assert [m.message["content"] for m in messages[::2]] == [
            f"q{task}.{turn}" for turn in range(TURNS)
        ]

    await asyncio.gather(*(converse(task) for task in range(TASKS)))
    assert await _count(store, "sessions") == TASKS
    assert await _count(store, "messages") == TASKS * TURNS * 2
    assert store.db.writer.failures == 0


async def test_a_failing_write_is_counted_and_spares_the_rest_of_its_batch(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = store.sessions.create(owner="alice", profile="p", system_prompt="s")
    # Queued together, so committed as one batch: the duplicate position fails it.
    store.sessions.add_messages(session_id, 0, stored(user("first"), assistant("second")))
    store.sessions.add_messages(session_id, 1, stored(assistant("duplicate position")))
    store.sessions.add_messages(session_id, 2, stored(user("third")))
    store.sessions.add_usage(session_id, Usage(input_tokens=5))
    with caplog.at_level(logging.ERROR, logger="hermes_core.persistence.writer"):
        await store.db.writer.flush()

    assert store.db.writer.failures == 1
    assert [r.getMessage() for r in caplog.records] == ["a store write failed: IntegrityError"]
    messages = await store.sessions.messages(session_id)
    assert [m.message["content"] for m in messages] == ["first", "second", "third"]
    session = await store.sessions.get("alice", session_id)
    assert session is not None
    assert session.usage == Usage(input_tokens=5)


def test_a_statement_written_without_parameters_runs_once_per_batch() -> None:
    index_new = text("SELECT 1")
    insert = text("INSERT INTO t VALUES (:x)")
    writes: list[Write] = [
        (insert, {"x": 1}, Phase.APPEND),
        (index_new, {}, Phase.INDEX),
        (insert, {"x": 2}, Phase.APPEND),
        (index_new, {}, Phase.INDEX),
    ]
    assert grouped(writes) == [(insert, [{"x": 1}, {"x": 2}]), (index_new, [{}])]


class _CountingCommitter:
    def __init__(self) -> None:
        self.batches: list[list[Write]] = []

    async def commit(self, writes: list[Write]) -> int:
        self.batches.append(writes)
        return 0

    async def close(self) -> None:
        return None


_WRITE = text("INSERT INTO t VALUES (:x)")


async def test_writes_queued_during_the_pause_share_one_commit() -> None:
    committer = _CountingCommitter()
    writer = WriteBehind(committer, gather_seconds=0.05)
    writer.submit(_WRITE, {"x": 1}, phase=Phase.APPEND)
    await asyncio.sleep(0.01)  # a run's start and its end, a moment apart
    writer.submit(_WRITE, {"x": 2}, phase=Phase.APPEND)
    await asyncio.sleep(0.1)
    assert [len(batch) for batch in committer.batches] == [2]


async def test_a_flush_does_not_wait_for_the_pause() -> None:
    committer = _CountingCommitter()
    writer = WriteBehind(committer, gather_seconds=60)
    writer.submit(_WRITE, {"x": 1}, phase=Phase.APPEND)
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert [len(batch) for batch in committer.batches] == [1]


# --- the writer's thread ---------------------------------------------------------------------


async def test_the_job_thread_answers_each_job_in_order_off_the_loop() -> None:
    jobs = _JobThread("test-jobs")
    loop_thread = threading.get_ident()

    def job(number: int) -> tuple[int, int]:
        return number, threading.get_ident()

    try:
        answers = await asyncio.gather(*(jobs.run(functools.partial(job, i)) for i in range(5)))
    finally:
        await jobs.stop()
    assert [number for number, _ in answers] == list(range(5))
    assert all(thread != loop_thread for _, thread in answers)


async def test_a_job_that_raises_hands_its_error_to_the_caller() -> None:
    def broken() -> None:
        raise ValueError("broken job")

    jobs = _JobThread("test-jobs")
    try:
        with pytest.raises(ValueError, match="broken job"):
            await jobs.run(broken)
        assert await jobs.run(lambda: "still working") == "still working"
    finally:
        await jobs.stop()


# --- text a database cannot hold --------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["lone \ud800 surrogate", "nul \x00 char"], ids=["surrogate", "nul"]
)
async def test_unstorable_text_is_stored_cleaned_and_spares_another_owners_writes(
    store: Store, bad: str
) -> None:
    # SQLite holds NUL as it is; PostgreSQL cannot, and no engine can encode a lone surrogate.
    sqlite_holds_it = "\x00" in bad and store.db.dialect == "sqlite"
    kept = bad if sqlite_holds_it else bad.replace("\ud800", "\ufffd").replace("\x00", "\ufffd")
    # Queued together, so committed as one batch: Bob's good writes share it with Alice's bad one.
    alice = store.sessions.create(owner="alice", profile="p", system_prompt="s")
    bob = store.sessions.create(owner="bob", profile="p", system_prompt="s")
    store.sessions.add_messages(alice, 0, stored(user(bad), assistant("fine")))
    store.sessions.add_messages(bob, 0, stored(user("hello"), assistant("hi")))
    await asyncio.wait_for(store.db.writer.flush(), timeout=30)

    assert store.db.writer.failures == 0
    bobs = await store.sessions.messages(bob)
    assert [m.message["content"] for m in bobs] == ["hello", "hi"]
    alices = await store.sessions.messages(alice)
    assert [m.message["content"] for m in alices] == [kept, "fine"]
    # The writer goes on working after the bad batch.
    store.sessions.add_messages(bob, 2, stored(user("again")))
    await asyncio.wait_for(store.db.writer.flush(), timeout=30)
    assert len(await store.sessions.messages(bob)) == 3


class _BrokenCommitter(_CountingCommitter):
    async def commit(self, writes: list[Write]) -> int:
        self.batches.append(writes)
        if len(self.batches) == 1:
            raise RuntimeError("a bug in a committer")
        return 0


async def test_a_commit_that_raises_wakes_its_waiters_and_the_writer_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    committer = _BrokenCommitter()
    writer = WriteBehind(committer, gather_seconds=0)
    writer.submit(_WRITE, {"x": 1}, phase=Phase.APPEND)
    with caplog.at_level(logging.ERROR, logger="hermes_core.persistence.writer"):
        await asyncio.wait_for(writer.flush(), timeout=5)
    assert writer.failures == 1
    assert "a store commit failed" in caplog.text
    writer.submit(_WRITE, {"x": 2}, phase=Phase.APPEND)
    await asyncio.wait_for(writer.flush(), timeout=5)
    assert [len(batch) for batch in committer.batches] == [1, 1]
    assert writer.failures == 1


async def test_the_sqlite_committer_binds_none_and_bools_as_the_driver_did(
    tmp_path: Path,
) -> None:
    committer = SqliteCommitter(str(tmp_path / "a.db"), setup=lambda _connection: None)
    await committer.close()  # its adapters stay: they are the driver's, for every connection
    connection = sqlite3.connect(":memory:")
    row = connection.execute(
        "SELECT ? IS NULL, typeof(?), ?, ?, typeof(?)", (None, None, True, False, True)
    ).fetchone()
    assert row == (1, "null", 1, 0, "integer")


@pytest.mark.parametrize(
    "value",
    [None, JSON.NULL, null(), {"a": [1, "é"]}, [1, 2.5], "text", 2**70, {1: "a"}],
    ids=["none", "json-null", "sql-null", "object", "list", "string", "big-int", "int-key"],
)
def test_the_sqlite_committer_binds_json_as_sqlalchemy_would(value: object) -> None:
    dialect = sqlite_dialect(json_serializer=json_codec.dumps_text)
    sqlalchemys = JSON().bind_processor(dialect)  # type: ignore[no-untyped-call]
    ours = _bind_processor(JSON(), dialect)
    assert sqlalchemys is not None
    assert ours is not None
    assert ours(value) == sqlalchemys(value)
