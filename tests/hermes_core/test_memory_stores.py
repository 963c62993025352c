from __future__ import annotations

from hermes_core.memory_stores import InMemoryMemoryStore, InMemorySessionIndex, InMemoryTodoStore
from hermes_core.messages import Message
from hermes_core.stores import MemoryStore, TodoItem, TodoStore


def _deploy_session() -> list[Message]:
    return [
        {"role": "system", "content": "You are a helpful agent. Remember the deploy rules."},
        {"role": "user", "content": "Why does the release fail?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "make release"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "ERROR: quokka-cache is stale"},
        {"role": "assistant", "content": "The cache is stale; clearing it fixes the release."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "You're welcome."},
    ]


async def test_memory_store_keeps_owners_and_targets_apart() -> None:
    store: MemoryStore = InMemoryMemoryStore()
    await store.save("alice", "memory", ["a note"])
    await store.save("alice", "user", ["Alice likes tea"])
    await store.save("bob", "memory", ["bob's note"])

    assert await store.load("alice", "memory") == ["a note"]
    assert await store.load("alice", "user") == ["Alice likes tea"]
    assert await store.load("bob", "memory") == ["bob's note"]
    assert await store.load("bob", "user") == []


async def test_memory_store_returns_copies() -> None:
    store = InMemoryMemoryStore()
    await store.save("alice", "memory", ["kept"])
    (await store.load("alice", "memory")).append("not kept")
    assert await store.load("alice", "memory") == ["kept"]


async def test_todo_store_saves_and_loads_per_session() -> None:
    store: TodoStore = InMemoryTodoStore()
    items = [TodoItem(id="1", content="write tests", status="in_progress")]
    await store.save("s1", items)
    items.append(TodoItem(id="2", content="not saved"))

    assert await store.load("s1") == [TodoItem(id="1", content="write tests", status="in_progress")]
    assert await store.load("s2") == []


async def test_search_finds_a_word_that_only_appears_in_a_tool_result() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())

    [hit] = await index.search("alice", "QUOKKA", limit=3)

    assert hit.session_id == "s1"
    assert hit.title == "Release failure"
    assert "quokka-cache is stale" in hit.snippet
    # The matching tool result ±2 messages; the system prompt is never part of a hit.
    assert [m["role"] for m in hit.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert hit.messages[2]["content"] == "ERROR: quokka-cache is stale"


async def test_search_matches_tool_call_arguments() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())

    [hit] = await index.search("alice", "make release", limit=3)

    assert hit.messages[0]["role"] == "user"
    assert "make release" in hit.snippet


async def test_search_ignores_the_system_prompt() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())

    assert await index.search("alice", "helpful", limit=3) == []


async def test_search_matches_whole_words_only() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())

    assert await index.search("alice", "quok", limit=3) == []


async def test_search_requires_every_query_word() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())

    assert await index.search("alice", "stale banana", limit=3) == []
    assert len(await index.search("alice", "stale cache", limit=3)) == 1


async def test_search_never_returns_another_owners_sessions() -> None:
    index = InMemorySessionIndex()
    index.add_session("bob", "s1", "Release failure", _deploy_session())

    assert await index.search("alice", "quokka", limit=3) == []


async def test_search_returns_newest_first_up_to_the_limit() -> None:
    index = InMemorySessionIndex()
    for n in range(4):
        index.add_session("alice", f"s{n}", f"Deploy {n}", [{"role": "user", "content": "deploy"}])

    hits = await index.search("alice", "deploy", limit=3)

    assert [h.session_id for h in hits] == ["s3", "s2", "s1"]


async def test_add_session_replaces_and_makes_the_session_newest() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Old title", [{"role": "user", "content": "deploy"}])
    index.add_session("alice", "s2", "Other", [{"role": "user", "content": "deploy"}])
    index.add_session("alice", "s1", "New title", [{"role": "user", "content": "deploy again"}])

    hits = await index.search("alice", "deploy", limit=5)

    assert [(h.session_id, h.title) for h in hits] == [("s1", "New title"), ("s2", "Other")]


async def test_search_snippet_is_about_eighty_chars_around_the_match() -> None:
    text = "filler " * 40 + "the zebra word sits here " + "tail " * 40
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Long", [{"role": "user", "content": text}])

    [hit] = await index.search("alice", "zebra", limit=1)

    assert "zebra" in hit.snippet
    assert hit.snippet.startswith("…")
    assert hit.snippet.endswith("…")
    assert len(hit.snippet) == 82


async def test_search_with_no_words_or_no_limit_finds_nothing() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())

    assert await index.search("alice", "  ?! ", limit=3) == []
    assert await index.search("alice", "quokka", limit=0) == []


async def test_search_hits_do_not_alias_stored_messages() -> None:
    index = InMemorySessionIndex()
    index.add_session("alice", "s1", "Release failure", _deploy_session())
    [hit] = await index.search("alice", "quokka", limit=1)
    hit.messages[2]["content"] = "changed"

    [again] = await index.search("alice", "quokka", limit=1)

    assert again.messages[2]["content"] == "ERROR: quokka-cache is stale"
