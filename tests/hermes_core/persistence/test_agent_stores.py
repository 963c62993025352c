"""The agent tools' storage over SQL: memory per scope and target, todos per session."""

from __future__ import annotations

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
