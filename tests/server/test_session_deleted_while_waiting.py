"""A turn continuing a stored session (``previous_response_id``) that waits for the session's
turn, while the session is deleted, finds it gone once the turn is its own: a
:class:`LookupError` (the 400 ``previous_response_not_found``), not an empty fork; on a real
SQLite store's conversation lock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_core.agent import Agent, AgentRequest
from hermes_core.persistence import Store, StoredMessage, sqlite_url
from hermes_core.providers.scripted import ScriptedProvider
from server.sessions.service import (
    BUSY_POLICY,
    BusyPolicy,
    SessionPoint,
    SessionService,
    SessionSettings,
)


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[SessionService]:
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        yield SessionService(store, SessionSettings(wait_seconds=30))
    finally:
        await store.close()


async def _waiting(sessions: SessionService, name: str) -> None:
    """Until a turn waits in ``name``'s line on this replica."""
    deadline = time.monotonic() + 10
    while ("alice", name) not in sessions._lines:
        assert time.monotonic() < deadline, "the turn never waited"
        await asyncio.sleep(0.01)


async def test_a_session_deleted_while_a_turn_waits_for_it_is_not_found(
    sessions: SessionService,
) -> None:
    store = sessions.store
    session_id = store.sessions.create(
        owner="alice", profile="hermes-agent", system_prompt="You are Hermes.", name="chain"
    )
    said = [
        StoredMessage({"role": "user", "content": "q1"}, "client"),
        StoredMessage({"role": "assistant", "content": "one"}, "agent"),
    ]
    store.sessions.add_messages(session_id, 0, said)
    await store.db.writer.flush()
    assert await store.sessions.lock("alice", "chain", "run_0", lease_seconds=60)
    BUSY_POLICY.set(BusyPolicy(mode="wait"))
    agent = Agent(provider=ScriptedProvider("unused"), owner="alice")
    turn = asyncio.create_task(
        sessions.begin_after(
            agent,
            AgentRequest(user_message="q2"),
            owner="alice",
            profile="hermes-agent",
            run_id="run_1",
            after=SessionPoint(session_id, 2),
        )
    )
    await _waiting(sessions, "chain")

    await store.retention.delete_conversation("alice", "chain")
    store.sessions.unlock("alice", "chain", "run_0")

    with pytest.raises(LookupError):
        await asyncio.wait_for(turn, 30)
    # The turn gave the lock back.
    assert await store.sessions.lock("alice", "chain", "run_2", lease_seconds=60)
