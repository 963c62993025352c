"""The agent tools' storage over SQL: memory per scope and target, todos per session."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event

from hermes_core.persistence import Store
from hermes_core.stores import MemoryStore, TodoItem, TodoStore


async def test_memory_is_kept_per_scope_and_target(store: Store) -> None:
    memory: MemoryStore = store.memory
    await memory.save("alice", "memory", ["a note"])
    await memory.save("alice", "user", ["Alice likes tea"])
    await memory.save("alice/work", "memory", ["the work scope's note"])
    await memory.save("bob", "memory", ["bob's note"])

    assert await memory.load("alice", "memory") == ["a note"]
    assert await memory.load("alice", "user") == ["Alice likes tea"]
    assert await memory.load("alice/work", "memory") == ["the work scope's note"]
    assert await memory.load("bob", "memory") == ["bob's note"]
    assert await memory.load("bob", "user") == []


async def test_saving_memory_replaces_the_entries(store: Store) -> None:
    await store.memory.save("alice", "memory", ["old", "kept"])
    await store.memory.save("alice", "memory", ["kept", "new ünïcödé"])
    assert await store.memory.load("alice", "memory") == ["kept", "new ünïcödé"]
    await store.memory.save("alice", "memory", [])
    assert await store.memory.load("alice", "memory") == []


async def test_todos_round_trip_per_session(store: Store) -> None:
    todos: TodoStore = store.todos
    items = [
        TodoItem(id="1", content="write tests", status="in_progress"),
        TodoItem(id="2", content="fix bugs"),
    ]
    await todos.save("sess_1", items)
    assert await todos.load("sess_1") == items
    assert await todos.load("sess_2") == []

    await todos.save("sess_1", [TodoItem(id="1", content="write tests", status="completed")])
    assert await todos.load("sess_1") == [
        TodoItem(id="1", content="write tests", status="completed")
    ]


def _count_memory_reads(store: Store) -> list[str]:
    reads: list[str] = []

    def before_execute(*args: Any) -> None:
        statement = str(args[2])
        if statement.lstrip().upper().startswith("SELECT") and "memory" in statement:
            reads.append(statement)

    event.listen(store.db.engine.sync_engine, "before_cursor_execute", before_execute)
    return reads


async def test_concurrent_snapshots_of_one_owner_share_one_read(store: Store) -> None:
    await store.memory.save("alice", "memory", ["a note"])
    reads = _count_memory_reads(store)
    snapshots = await asyncio.gather(*(store.memory.snapshot("alice") for _ in range(50)))
    assert len(reads) == 1
    assert all(snapshot["memory"] == ["a note"] for snapshot in snapshots)
    snapshots[0]["memory"].append("changed by one caller")  # each caller has its own copy
    assert (await store.memory.snapshot("alice"))["memory"] == ["a note"]


async def test_a_snapshot_taken_after_a_save_sees_it(store: Store) -> None:
    assert (await store.memory.snapshot("alice"))["memory"] == []  # cached now
    await store.memory.save("alice", "memory", ["remember this"])
    assert (await store.memory.snapshot("alice"))["memory"] == ["remember this"]
