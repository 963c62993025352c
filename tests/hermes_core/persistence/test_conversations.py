"""Conversations in the store (SQLite, then PostgreSQL): the row is its key's alone, its items
live in the session named by its id, a removed message closes the gap, and deleting the
conversation deletes its sessions."""

from __future__ import annotations

from hermes_core.persistence import Store, StoredMessage


def _said(*texts: str) -> list[StoredMessage]:
    return [StoredMessage({"role": "user", "content": text}, "client") for text in texts]


async def test_a_conversation_is_its_owners_only(store: Store) -> None:
    made = await store.conversations.create("alice", {"topic": "birds"})

    assert made.id.startswith("conv_")
    assert (await store.conversations.get("alice", made.id)) == made
    assert await store.conversations.get("bob", made.id) is None
    assert await store.conversations.update("bob", made.id, {"x": "y"}) is None
    assert not await store.conversations.delete("bob", made.id)
    updated = await store.conversations.update("alice", made.id, {"topic": "fish"})
    assert updated is not None
    assert updated.metadata == {"topic": "fish"}


async def test_items_are_appended_to_the_session_named_by_the_conversation(store: Store) -> None:
    made = await store.conversations.create("alice", {})
    assert await store.conversations.session("alice", made.id) is None

    session_id = await store.conversations.start_session("alice", made.id)
    assert await store.conversations.append(session_id, _said("one", "two")) == 0
    assert await store.conversations.append(session_id, _said("three")) == 2

    assert await store.conversations.session("alice", made.id) == session_id
    assert await store.conversations.session("bob", made.id) is None
    held = await store.conversations.messages(session_id)
    assert [m.stored.message["content"] for m in held] == ["one", "two", "three"]
    assert len({m.row_id for m in held}) == 3
    session = await store.sessions.get("alice", session_id)
    assert session is not None
    assert session.name == made.id


async def test_a_removed_message_leaves_no_gap_and_the_rest_keep_their_rows(
    store: Store,
) -> None:
    made = await store.conversations.create("alice", {})
    session_id = await store.conversations.start_session("alice", made.id)
    await store.conversations.append(session_id, _said("a", "b", "c", "d"))
    before = {
        m.stored.message["content"]: m.row_id
        for m in await store.conversations.messages(session_id)
    }

    await store.conversations.remove(session_id, [1, 2])

    after = await store.conversations.messages(session_id)
    assert [(m.position, m.stored.message["content"]) for m in after] == [(0, "a"), (1, "d")]
    assert {m.stored.message["content"]: m.row_id for m in after} == {
        "a": before["a"],
        "d": before["d"],
    }
    # The transcript a turn reads is the same, and the next message goes at its end.
    assert [m.message["content"] for m in await store.sessions.messages(session_id)] == ["a", "d"]
    assert await store.conversations.append(session_id, _said("e")) == 2


async def test_a_first_turn_binds_a_session_the_api_started(store: Store) -> None:
    made = await store.conversations.create("alice", {})
    session_id = await store.conversations.start_session("alice", made.id)

    await store.conversations.bind(session_id, "hermes-agent", "You are Hermes.")
    await store.conversations.bind(session_id, "other", "Not this.")

    session = await store.sessions.get("alice", session_id)
    assert session is not None
    assert (session.profile, session.system_prompt) == ("hermes-agent", "You are Hermes.")


async def test_deleting_a_conversation_deletes_its_sessions_and_messages(store: Store) -> None:
    made = await store.conversations.create("alice", {})
    own = await store.conversations.start_session("alice", made.id)
    scoped = await store.conversations.start_session("alice/user-7", made.id)
    await store.conversations.append(own, _said("mine"))
    await store.conversations.append(scoped, _said("scoped"))
    other = await store.conversations.create("alice", {})
    kept = await store.conversations.start_session("alice", other.id)
    await store.conversations.append(kept, _said("kept"))

    assert sorted(await store.conversations.session_owners("alice", made.id)) == [
        "alice",
        "alice/user-7",
    ]
    assert await store.conversations.session_owners("bob", made.id) == []

    assert await store.conversations.delete("alice", made.id)

    assert await store.conversations.get("alice", made.id) is None
    assert await store.sessions.get("alice", own) is None
    assert await store.sessions.get("alice/user-7", scoped) is None
    assert await store.sessions.messages(own) == []
    assert [m.message["content"] for m in await store.sessions.messages(kept)] == ["kept"]
