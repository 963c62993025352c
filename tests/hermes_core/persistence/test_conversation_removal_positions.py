"""Removing a conversation's messages (SQLite, then PostgreSQL) keeps each stored response of
its session ending where it ended: past the removed messages, its length shrinks by those
before its end, so ``previous_response_id`` still continues from the same message."""

from __future__ import annotations

from hermes_core.persistence import Store, StoredMessage, StoredResponse


def _said(*texts: str) -> list[StoredMessage]:
    return [StoredMessage({"role": "user", "content": text}, "client") for text in texts]


def _ended_at(response_id: str, session_id: str, length: int) -> StoredResponse:
    return StoredResponse(
        id=response_id,
        owner="alice",
        session_id=session_id,
        previous_id=None,
        run_id=None,
        status="completed",
        request={},
        body={"id": response_id},
        transcript_length=length,
        created_at=1000.0,
        updated_at=1000.0,
    )


async def test_removed_messages_move_the_ends_of_the_sessions_responses_after_them(
    store: Store,
) -> None:
    made = await store.conversations.create("alice", {})
    session_id = await store.conversations.start_session("alice", made.id)
    await store.conversations.append(session_id, _said("a", "b", "c", "d", "e"))
    other = await store.conversations.start_session("alice", "another")
    await store.conversations.append(other, _said("x", "y", "z", "w"))
    ends = {"before": 1, "through_b": 2, "through_c": 3, "after": 5}
    for response_id, length in ends.items():
        store.responses.save(_ended_at(response_id, session_id, length))
    store.responses.save(_ended_at("elsewhere", other, 4))

    await store.conversations.remove(session_id, [1, 3])

    moved = {}
    for response_id in [*ends, "elsewhere"]:
        found = await store.responses.get("alice", response_id)
        assert found is not None
        moved[response_id] = found.transcript_length
    # Each holds what it held less "b" and "d": "a" | "a" | "a", "c" | "a", "c", "e".
    assert moved == {"before": 1, "through_b": 1, "through_c": 2, "after": 3, "elsewhere": 4}
