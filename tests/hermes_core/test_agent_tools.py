from __future__ import annotations

import json
from typing import Any

from hermes_core.memory_stores import InMemoryMemoryStore, InMemorySessionIndex, InMemoryTodoStore
from hermes_core.stores import TodoItem
from hermes_core.tools.agent_tools import (
    memory_snapshot,
    memory_tool,
    session_search_tool,
    todo_tool,
)
from hermes_core.tools.registry import Tool, ToolContext


def _ctx() -> ToolContext:
    return ToolContext(run_id="r", task_id="t", call_id="c", is_interrupted=lambda: False)


async def _call(tool: Tool, args: dict[str, Any]) -> str:
    result = await tool.handler(args, _ctx())
    assert isinstance(result, str)
    return result


# --- todo -------------------------------------------------------------------------------------


async def test_todo_without_arguments_reads_the_list() -> None:
    store = InMemoryTodoStore()
    await store.save("s1", [TodoItem(id="1", content="plan", status="completed")])

    result = json.loads(await _call(todo_tool(store, "s1"), {}))

    assert result == {
        "todos": [{"id": "1", "content": "plan", "status": "completed"}],
        "counts": {"pending": 0, "in_progress": 0, "completed": 1, "cancelled": 0},
        "total": 1,
    }


async def test_todo_replaces_the_list_by_default() -> None:
    store = InMemoryTodoStore()
    await store.save("s1", [TodoItem(id="old", content="gone")])
    todos = [
        {"id": "1", "content": "write code", "status": "in_progress"},
        {"id": "2", "content": "run tests"},
    ]

    result = json.loads(await _call(todo_tool(store, "s1"), {"todos": todos}))

    assert [t["id"] for t in result["todos"]] == ["1", "2"]
    assert result["todos"][1]["status"] == "pending"
    assert result["counts"] == {"pending": 1, "in_progress": 1, "completed": 0, "cancelled": 0}
    assert await store.load("s1") == [
        TodoItem(id="1", content="write code", status="in_progress"),
        TodoItem(id="2", content="run tests", status="pending"),
    ]


async def test_todo_merge_updates_by_id_and_appends_new_items() -> None:
    store = InMemoryTodoStore()
    await store.save(
        "s1",
        [
            TodoItem(id="1", content="write code", status="in_progress"),
            TodoItem(id="2", content="test"),
        ],
    )
    update = {
        "todos": [{"id": "1", "status": "completed"}, {"id": "3", "content": "release"}],
        "merge": True,
    }

    result = json.loads(await _call(todo_tool(store, "s1"), update))

    assert result["todos"] == [
        {"id": "1", "content": "write code", "status": "completed"},
        {"id": "2", "content": "test", "status": "pending"},
        {"id": "3", "content": "release", "status": "pending"},
    ]
    assert result["total"] == 3


async def test_todo_rejects_two_items_in_progress_and_saves_nothing() -> None:
    store = InMemoryTodoStore()
    await store.save("s1", [TodoItem(id="1", content="a", status="in_progress")])
    update = {"todos": [{"id": "2", "content": "b", "status": "in_progress"}], "merge": True}

    result = await _call(todo_tool(store, "s1"), update)

    assert result.startswith("Error: only one item may be in_progress")
    assert "1, 2" in result
    assert await store.load("s1") == [TodoItem(id="1", content="a", status="in_progress")]


async def test_todo_returns_an_error_string_for_bad_shapes() -> None:
    tool = todo_tool(InMemoryTodoStore(), "s1")

    assert (await _call(tool, {"todos": "buy milk"})).startswith("Error: todos must be an array")
    assert "status must be one of" in await _call(
        tool, {"todos": [{"id": "1", "content": "x", "status": "done"}]}
    )
    assert "need content" in await _call(tool, {"todos": [{"id": "1"}]})
    assert "repeats" in await _call(
        tool, {"todos": [{"id": "1", "content": "a"}, {"id": "1", "content": "b"}]}
    )
    assert (await _call(tool, {"merge": "yes"})).startswith("Error: merge must be")


async def test_todo_summary_counts_items() -> None:
    tool = todo_tool(InMemoryTodoStore(), "s1")

    assert tool.summary({"todos": [{"id": "1"}, {"id": "2"}, {"id": "3"}]}) == "todo 3 items"
    assert tool.summary({}) == "todo read"
    assert tool.concurrent_safe is False


# --- memory -----------------------------------------------------------------------------------


async def test_memory_add_appends_an_entry_and_reports_usage() -> None:
    store = InMemoryMemoryStore()
    tool = memory_tool(store, "alice")

    await _call(tool, {"action": "add", "target": "memory", "content": "Repo uses uv."})
    result = await _call(tool, {"action": "add", "target": "memory", "content": "CI is slow."})

    assert await store.load("alice", "memory") == ["Repo uses uv.", "CI is slow."]
    assert "Added to memory" in result
    assert f"{len('Repo uses uv.' + chr(10) + '§' + chr(10) + 'CI is slow.')}/2200 chars" in result


async def test_memory_replace_swaps_the_entry_containing_old_text() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "user", ["Name: Alice", "Prefers tabs"])

    result = await _call(
        memory_tool(store, "alice"),
        {"action": "replace", "target": "user", "old_text": "tabs", "content": "Prefers spaces"},
    )

    assert await store.load("alice", "user") == ["Name: Alice", "Prefers spaces"]
    assert "Replaced in user" in result


async def test_memory_remove_deletes_the_entry_containing_old_text() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["keep me", "drop me"])

    result = await _call(
        memory_tool(store, "alice"), {"action": "remove", "target": "memory", "old_text": "drop"}
    )

    assert await store.load("alice", "memory") == ["keep me"]
    assert "Removed from memory: 'drop me'" in result


async def test_memory_ambiguous_old_text_is_an_error_listing_the_matches() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["deploy with make", "deploy on Fridays", "other"])

    result = await _call(
        memory_tool(store, "alice"), {"action": "remove", "target": "memory", "old_text": "deploy"}
    )

    assert result.startswith("Error: 'deploy' matches 2 entries in memory")
    assert "1. deploy with make\n2. deploy on Fridays" in result
    assert len(await store.load("alice", "memory")) == 3


async def test_memory_old_text_matching_nothing_is_an_error() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["a note"])

    result = await _call(
        memory_tool(store, "alice"),
        {"action": "replace", "target": "memory", "old_text": "absent", "content": "x"},
    )

    assert result.startswith("Error: no entry in memory contains 'absent'")
    assert "1. a note" in result


async def test_memory_missing_old_text_or_content_is_an_error() -> None:
    tool = memory_tool(InMemoryMemoryStore(), "alice")

    assert "old_text is required" in await _call(tool, {"action": "remove", "target": "memory"})
    assert "content is required" in await _call(tool, {"action": "add", "target": "memory"})
    assert "action must be one of" in await _call(tool, {"action": "delete", "target": "user"})
    assert "target must be one of" in await _call(tool, {"action": "add", "target": "notes"})
    assert "content must be a string" in await _call(
        tool, {"action": "add", "target": "user", "content": ["x"]}
    )


async def test_memory_over_the_default_memory_limit_is_refused_with_usage_and_entries() -> None:
    store = InMemoryMemoryStore()
    entries = ["a" * 1000, "b" * 1000]  # 2003 chars with the separator
    await store.save("alice", "memory", entries)

    result = await _call(
        memory_tool(store, "alice"), {"action": "add", "target": "memory", "content": "c" * 200}
    )

    assert result.startswith("Error: the memory store is full")
    assert "2003/2200 chars" in result
    assert "2206/2200 chars" in result
    assert f"1. {'a' * 1000}\n2. {'b' * 1000}" in result
    assert await store.load("alice", "memory") == entries


async def test_memory_over_the_default_user_limit_is_refused() -> None:
    store = InMemoryMemoryStore()
    tool = memory_tool(store, "alice")
    await _call(tool, {"action": "add", "target": "user", "content": "x" * 1375})

    result = await _call(tool, {"action": "add", "target": "user", "content": "y"})

    assert result.startswith("Error: the user store is full")
    assert "1375/1375 chars" in result
    assert await store.load("alice", "user") == ["x" * 1375]


async def test_memory_replace_that_grows_past_the_limit_is_refused() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "user", ["short"])
    tool = memory_tool(store, "alice", user_limit=10)

    result = await _call(
        tool, {"action": "replace", "target": "user", "old_text": "short", "content": "much longer"}
    )

    assert "full" in result
    assert "5/10 chars" in result
    assert await store.load("alice", "user") == ["short"]


async def test_memory_add_of_an_existing_entry_changes_nothing() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["uses uv"])

    result = await _call(
        memory_tool(store, "alice"), {"action": "add", "target": "memory", "content": "uses uv"}
    )

    assert result == "Already stored in memory; nothing changed. Usage: 7/2200 chars, 1 entry."
    assert await store.load("alice", "memory") == ["uses uv"]


async def test_memory_over_a_lowered_limit_may_still_shrink() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["0123456789", "abcdefghij"])
    tool = memory_tool(store, "alice", memory_limit=12)

    result = await _call(
        tool, {"action": "replace", "target": "memory", "old_text": "abc", "content": "short"}
    )

    assert result.endswith("Usage: 18/12 chars, 2 entries.")
    assert await store.load("alice", "memory") == ["0123456789", "short"]


async def test_memory_targets_are_separate() -> None:
    store = InMemoryMemoryStore()
    tool = memory_tool(store, "alice")

    await _call(tool, {"action": "add", "target": "user", "content": "Alice is a chemist"})

    assert await store.load("alice", "memory") == []
    assert "no entry in memory" in await _call(
        tool, {"action": "remove", "target": "memory", "old_text": "chemist"}
    )


async def test_memory_is_isolated_per_owner() -> None:
    store = InMemoryMemoryStore()
    await _call(memory_tool(store, "alice"), {"action": "add", "target": "memory", "content": "A"})

    assert await store.load("bob", "memory") == []
    assert "no entry" in await _call(
        memory_tool(store, "bob"), {"action": "remove", "target": "memory", "old_text": "A"}
    )


async def test_memory_summary_names_action_and_target() -> None:
    tool = memory_tool(InMemoryMemoryStore(), "alice")

    assert tool.summary({"action": "add", "target": "user"}) == "memory add → user"
    assert tool.concurrent_safe is False


async def test_memory_snapshot_renders_both_targets() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["uses uv", "CI is slow"])
    await store.save("alice", "user", ["Name: Alice"])

    snapshot = await memory_snapshot(store, "alice")

    assert snapshot == (
        "## Your notes (20/2200 chars)\nuses uv\n§\nCI is slow\n\n"
        "## About the user (11/1375 chars)\nName: Alice"
    )


async def test_memory_snapshot_is_empty_without_entries() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "user", ["Name: Alice"])

    assert await memory_snapshot(store, "bob") == ""
    assert (await memory_snapshot(store, "alice")).startswith("## About the user")


# --- session_search ---------------------------------------------------------------------------


def _index_with_tool_result_session() -> InMemorySessionIndex:
    index = InMemorySessionIndex()
    index.add_session(
        "alice",
        "s-old",
        "Flaky deploy",
        [
            {"role": "user", "content": "Why did the deploy fail?"},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {
                            "name": "terminal",
                            "arguments": '{"command": "kubectl logs"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "OOMKilled: pangolin-worker"},
            {"role": "assistant", "content": "It ran out of memory."},
        ],
    )
    index.add_session("alice", "s-new", "Lunch", [{"role": "user", "content": "Pizza?"}])
    return index


async def test_session_search_finds_a_word_only_in_an_earlier_tool_result() -> None:
    tool = session_search_tool(_index_with_tool_result_session(), "alice")

    [hit] = json.loads(await _call(tool, {"query": "pangolin"}))

    assert hit["session_id"] == "s-old"
    assert hit["title"] == "Flaky deploy"
    assert "pangolin-worker" in hit["snippet"]
    assert hit["messages"] == [
        {"role": "user", "content": "Why did the deploy fail?"},
        {
            "role": "assistant",
            "content": 'Let me look.\n[called terminal({"command": "kubectl logs"})]',
        },
        {"role": "tool", "content": "OOMKilled: pangolin-worker"},
        {"role": "assistant", "content": "It ran out of memory."},
    ]


async def test_session_search_does_not_see_other_owners() -> None:
    tool = session_search_tool(_index_with_tool_result_session(), "bob")

    assert await _call(tool, {"query": "pangolin"}) == "No sessions matched 'pangolin'. " + (
        "Try fewer or different words."
    )


async def test_session_search_respects_the_limit_newest_first() -> None:
    index = InMemorySessionIndex()
    for n in range(12):
        index.add_session("alice", f"s{n}", f"Deploy {n}", [{"role": "user", "content": "deploy"}])
    tool = session_search_tool(index, "alice")

    default = json.loads(await _call(tool, {"query": "deploy"}))
    two = json.loads(await _call(tool, {"query": "deploy", "limit": 2}))
    capped = json.loads(await _call(tool, {"query": "deploy", "limit": 50}))

    assert [h["session_id"] for h in default] == ["s11", "s10", "s9"]
    assert [h["session_id"] for h in two] == ["s11", "s10"]
    assert len(capped) == 10


async def test_session_search_rejects_bad_arguments() -> None:
    tool = session_search_tool(InMemorySessionIndex(), "alice")

    assert (await _call(tool, {})).startswith("Error: query must be")
    assert (await _call(tool, {"query": "  "})).startswith("Error: query must be")
    assert (await _call(tool, {"query": "x", "limit": "3"})).startswith("Error: limit must be")


async def test_session_search_summary_quotes_the_query() -> None:
    tool = session_search_tool(InMemorySessionIndex(), "alice")

    assert tool.summary({"query": "deploy"}) == "session_search 'deploy'"
    assert tool.concurrent_safe is True


def test_every_agent_tool_has_an_object_schema_with_described_properties() -> None:
    tools = [
        todo_tool(InMemoryTodoStore(), "s1"),
        memory_tool(InMemoryMemoryStore(), "alice"),
        session_search_tool(InMemorySessionIndex(), "alice"),
    ]
    for tool in tools:
        assert tool.parameters["type"] == "object"
        assert tool.description
        for prop in tool.parameters["properties"].values():
            assert prop["description"]
