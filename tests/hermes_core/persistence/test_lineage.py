"""Lineage: compression children continue their parent, forks branch off any point of the
logical transcript."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_core.messages import Message
from hermes_core.persistence import SessionInfo, Store, StoredMessage
from hermes_core.usage import Usage
from tests.hermes_core.persistence.helpers import assistant, new_session, reload, stored, user

PARENT = [user("u0"), assistant("a1"), user("u2"), assistant("a3")]
SUMMARY = [user("summary of u0..a3"), assistant("ok")]
OWN = [user("u4"), assistant("a5"), user("u6")]


@dataclass(frozen=True)
class Chain:
    parent: SessionInfo
    child: SessionInfo


def _compress(store: Store, parent: SessionInfo, child_id: str, own: list[Message]) -> None:
    """What the journal does when a run compresses: child, compacted copy, parent ended."""
    store.sessions.create_compression_child(parent.id, child_id)
    store.sessions.add_messages(child_id, 0, stored(*SUMMARY, compacted=True))
    store.sessions.add_messages(child_id, len(SUMMARY), stored(*own))
    store.sessions.end(parent.id, "compression")


async def _chain(store: Store) -> Chain:
    parent = await new_session(store, *PARENT, name="chat", title="Deploy")
    _compress(store, parent, "sess_child", OWN)
    return Chain(await reload(store, parent.id), await reload(store, "sess_child"))


def _messages(entries: list[StoredMessage]) -> list[Message]:
    return [entry.message for entry in entries]


async def _logical(store: Store, session: SessionInfo) -> list[Message]:
    return [entry.stored.message for entry in await store.sessions.logical(session)]


async def test_a_compression_child_continues_its_parent(store: Store) -> None:
    chain = await _chain(store)
    parent, child = chain.parent, chain.child
    assert (child.owner, child.name, child.profile) == (parent.owner, parent.name, parent.profile)
    assert (child.system_prompt, child.title) == (parent.system_prompt, parent.title)
    assert (child.base_id, child.parent_id, child.origin) == (parent.id, parent.id, "compression")
    assert child.usage == Usage()
    assert (child.ended_at, parent.end_reason) == (None, "compression")


async def test_a_childs_logical_transcript_is_its_parents_then_its_own(store: Store) -> None:
    chain = await _chain(store)
    logical = await store.sessions.logical(chain.child)
    assert [entry.stored.message for entry in logical] == PARENT + OWN
    assert [(entry.session_id, entry.position) for entry in logical] == [
        *((chain.parent.id, position) for position in range(4)),
        *((chain.child.id, position) for position in range(2, 5)),
    ]


async def test_a_fork_inside_the_childs_own_messages_keeps_the_compacted_ones(
    store: Store,
) -> None:
    chain = await _chain(store)
    fork_id, kept = await store.sessions.fork(chain.child, len(PARENT) + 1)
    fork = await reload(store, fork_id)

    assert kept == [*stored(*SUMMARY, compacted=True), *stored(OWN[0])]
    assert await store.sessions.messages(fork_id) == kept
    assert (fork.parent_id, fork.origin, fork.base_id) == (chain.child.id, "fork", chain.parent.id)
    assert await _logical(store, fork) == [*PARENT, OWN[0]]


async def test_a_fork_inside_compacted_history_copies_the_parents_messages(store: Store) -> None:
    chain = await _chain(store)
    fork_id, kept = await store.sessions.fork(chain.child, 2)
    fork = await reload(store, fork_id)

    assert _messages(kept) == PARENT[:2]
    assert not any(entry.compacted for entry in kept)
    assert _messages(await store.sessions.messages(fork_id)) == PARENT[:2]
    assert (fork.parent_id, fork.origin, fork.base_id) == (chain.child.id, "fork", None)
    assert (fork.name, fork.title, fork.owner) == ("chat", "Deploy", "alice")


async def test_a_fork_at_any_point_keeps_the_logical_transcript_before_it(store: Store) -> None:
    # Two compressions deep: parent ← child ← grandchild.
    chain = await _chain(store)
    grand_own = [assistant("a7"), user("u8")]
    _compress(store, chain.child, "sess_grandchild", grand_own)
    grandchild = await reload(store, "sess_grandchild")
    whole = PARENT + OWN + grand_own
    assert await _logical(store, grandchild) == whole

    for at in range(len(whole) + 1):
        fork_id, _ = await store.sessions.fork(grandchild, at)
        fork = await reload(store, fork_id)
        assert await _logical(store, fork) == whole[:at], f"fork at {at}"
