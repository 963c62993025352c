"""Sessions and transcripts: exact round trips, the turn lock, branch tips and token counters."""

from __future__ import annotations

import asyncio

from hermes_core.messages import Message
from hermes_core.persistence import Store, StoredMessage
from hermes_core.usage import Usage
from tests.hermes_core.persistence.helpers import assistant, new_session, reload, stored, user

LEASE = 60.0

EVERY_SHAPE: list[Message] = [
    {"role": "user", "content": "plain text", "name": "alice_w"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is in this picture?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    },
    {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning": "The user wants a description; run the tool first.",
        "reasoning_replay": {
            "api_mode": "anthropic_messages",
            "items": [{"type": "thinking", "thinking": "…", "signature": "c2lnbmF0dXJl"}],
        },
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "vision", "arguments": '{"detail": "high", "n": 2}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "noop", "arguments": "{"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a cat on a mat ünïcödé 🐈"},
    {"role": "tool", "tool_call_id": "call_2", "content": ""},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "x", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": [{"type": "text", "text": "parts"}]},
    {"role": "assistant", "content": "A cat."},
]


async def test_messages_round_trip_exactly(store: Store) -> None:
    session = await new_session(store, *EVERY_SHAPE)
    assert [s.message for s in await store.sessions.messages(session.id)] == EVERY_SHAPE


async def test_assistant_null_content_comes_back_absent(store: Store) -> None:
    # Providers write ``content: None`` beside tool calls; the store keeps no difference
    # between a null and a missing assistant content (every adapter reads them alike).
    message: Message = {**EVERY_SHAPE[5], "content": None}
    session = await new_session(store, message)
    assert [s.message for s in await store.sessions.messages(session.id)] == [EVERY_SHAPE[5]]


async def test_source_and_compacted_flags_are_kept(store: Store) -> None:
    written = [
        StoredMessage(user("summary of earlier turns"), "agent", compacted=True),
        StoredMessage(user("hi"), "client"),
        StoredMessage(assistant("hello"), "agent"),
    ]
    session_id = store.sessions.create(owner="alice", profile="p", system_prompt="s")
    store.sessions.add_messages(session_id, 0, written)
    await store.db.writer.flush()
    assert await store.sessions.messages(session_id) == written


async def test_messages_come_back_in_position_order(store: Store) -> None:
    session_id = store.sessions.create(owner="alice", profile="p", system_prompt="s")
    store.sessions.add_messages(session_id, 2, stored(user("third"), assistant("fourth")))
    store.sessions.add_messages(session_id, 0, stored(user("first"), assistant("second")))
    await store.db.writer.flush()
    texts = [s.message["content"] for s in await store.sessions.messages(session_id)]
    assert texts == ["first", "second", "third", "fourth"]


async def test_a_session_is_read_only_by_its_owner(store: Store) -> None:
    session = await new_session(store, user("hi"), owner="alice")
    assert await store.sessions.get("bob", session.id) is None
    assert (await store.sessions.get("alice", session.id)) == session


async def test_create_keeps_what_it_was_given(store: Store) -> None:
    session_id = store.sessions.create(
        owner="alice", profile="coder", system_prompt="Be brief.", name="chat-1", title="x" * 100
    )
    session = await reload(store, session_id)
    assert (session.owner, session.name, session.profile) == ("alice", "chat-1", "coder")
    assert session.system_prompt == "Be brief."
    assert session.title == "x" * 80
    assert (session.parent_id, session.origin, session.base_id) == (None, None, None)
    assert (session.ended_at, session.end_reason) == (None, None)
    assert session.usage == Usage()


async def test_add_usage_accumulates_every_counter(store: Store) -> None:
    session = await new_session(store, user("hi"))
    first = Usage(
        input_tokens=100,
        output_tokens=20,
        cache_read_tokens=60,
        cache_write_tokens=30,
        reasoning_tokens=5,
    )
    second = Usage(input_tokens=7, output_tokens=3, reasoning_tokens=1)
    store.sessions.add_usage(session.id, first)
    store.sessions.add_usage(session.id, second)
    updated = await reload(store, session.id)
    assert updated.usage == first + second
    assert updated.updated_at >= session.updated_at


# --- the turn lock ----------------------------------------------------------------------------


async def test_a_second_run_is_refused_the_turn(store: Store) -> None:
    assert await store.sessions.lock("alice", "chat", "run_1", lease_seconds=LEASE)
    assert not await store.sessions.lock("alice", "chat", "run_2", lease_seconds=LEASE)


async def test_only_the_holders_unlock_gives_the_turn_to_the_next_run(store: Store) -> None:
    await store.sessions.lock("alice", "chat", "run_1", lease_seconds=LEASE)
    store.sessions.unlock("alice", "chat", "run_2")
    assert not await store.sessions.lock("alice", "chat", "run_2", lease_seconds=LEASE)
    store.sessions.unlock("alice", "chat", "run_1")
    assert await store.sessions.lock("alice", "chat", "run_2", lease_seconds=LEASE)


async def test_an_expired_lease_is_free_again(store: Store) -> None:
    assert await store.sessions.lock("alice", "chat", "run_1", lease_seconds=0.05)
    await asyncio.sleep(0.1)
    assert await store.sessions.lock("alice", "chat", "run_2", lease_seconds=LEASE)
    assert not await store.sessions.lock("alice", "chat", "run_3", lease_seconds=LEASE)


async def test_unlock_runs_frees_only_the_dead_runs_locks(store: Store) -> None:
    for name, run_id in (("a", "dead_1"), ("b", "dead_2"), ("c", "alive")):
        assert await store.sessions.lock("alice", name, run_id, lease_seconds=LEASE)
    await store.sessions.unlock_runs(["dead_1", "dead_2"])
    assert await store.sessions.lock("alice", "a", "next_a", lease_seconds=LEASE)
    assert await store.sessions.lock("alice", "b", "next_b", lease_seconds=LEASE)
    assert not await store.sessions.lock("alice", "c", "next_c", lease_seconds=LEASE)


async def test_owners_and_names_lock_independently(store: Store) -> None:
    assert await store.sessions.lock("alice", "chat", "run_1", lease_seconds=LEASE)
    assert await store.sessions.lock("bob", "chat", "run_2", lease_seconds=LEASE)
    assert await store.sessions.lock("alice", "other", "run_3", lease_seconds=LEASE)


async def test_only_one_of_many_concurrent_claimants_gets_the_turn(store: Store) -> None:
    claims = [
        store.sessions.lock("alice", "chat", f"run_{i}", lease_seconds=LEASE) for i in range(8)
    ]
    assert sorted(await asyncio.gather(*claims)) == [False] * 7 + [True]


# --- tips -------------------------------------------------------------------------------------


async def _sessions_in_order(store: Store, count: int, *, name: str) -> list[str]:
    """``count`` sessions of conversation ``name``, each strictly newer than the last."""
    ids = []
    for _ in range(count):
        ids.append((await new_session(store, user("hi"), name=name)).id)
        await asyncio.sleep(0.002)  # distinct updated_at on any clock
    return ids


async def _tip_ids(store: Store, owner: str, name: str, *, limit: int = 10) -> list[str]:
    return [tip.id for tip in await store.sessions.tips(owner, name, limit=limit)]


async def test_tips_come_newest_first_up_to_the_limit(store: Store) -> None:
    first, second, third = await _sessions_in_order(store, 3, name="chat")
    assert await _tip_ids(store, "alice", "chat") == [third, second, first]
    assert await _tip_ids(store, "alice", "chat", limit=2) == [third, second]


async def test_activity_makes_a_session_the_newest_tip(store: Store) -> None:
    first, second = await _sessions_in_order(store, 2, name="chat")
    store.sessions.add_usage(first, Usage(input_tokens=1))
    await store.db.writer.flush()
    assert await _tip_ids(store, "alice", "chat") == [first, second]


async def test_tips_leave_out_sessions_ended_by_compression(store: Store) -> None:
    compressed, finished, live = await _sessions_in_order(store, 3, name="chat")
    store.sessions.end(compressed, "compression")
    store.sessions.end(finished, "client_closed")
    await store.db.writer.flush()
    assert await _tip_ids(store, "alice", "chat") == [live, finished]


async def test_tips_hold_only_the_owners_sessions_of_that_name(store: Store) -> None:
    mine = (await new_session(store, user("hi"), name="chat")).id
    await new_session(store, user("hi"), name="other")
    await new_session(store, user("hi"), name=None)
    await new_session(store, user("hi"), name="chat", owner="bob")
    assert await _tip_ids(store, "alice", "chat") == [mine]
