"""Turns waiting for a busy conversation on one replica take it in the order they came
(``session_busy: enqueue``), on a real SQLite store's conversation lock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_core.agent import Agent, AgentRequest
from hermes_core.persistence import Store, sqlite_url
from hermes_core.providers.scripted import ScriptedProvider
from server.errors import SessionBusy
from server.sessions.service import (
    BUSY_POLICY,
    BusyMode,
    BusyPolicy,
    SessionQueued,
    SessionService,
    SessionSettings,
    queued_when_busy,
)


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[SessionService]:
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        yield SessionService(store, SessionSettings(wait_seconds=0.5))
    finally:
        await store.close()


async def _turn(sessions: SessionService, run_id: str, taken: list[str]) -> None:
    """Begin a turn of ``busy``, note that it has the conversation, and end it at once."""
    agent = Agent(provider=ScriptedProvider("unused"), owner="alice")
    await sessions.begin(
        agent,
        AgentRequest(user_message=run_id),
        owner="alice",
        profile="hermes-agent",
        run_id=run_id,
        name="busy",
    )
    taken.append(run_id)
    sessions.abandon(run_id)


async def _queued(sessions: SessionService, count: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        line = sessions._lines.get(("alice", "busy"))
        if line is not None and line.users == count:
            return
        assert time.monotonic() < deadline, "the turns never lined up"
        await asyncio.sleep(0.01)


async def test_enqueued_turns_take_the_conversation_in_the_order_they_came(
    sessions: SessionService,
) -> None:
    assert await sessions.store.sessions.lock("alice", "busy", "run_0", lease_seconds=60)
    taken: list[str] = []
    BUSY_POLICY.set(BusyPolicy(mode="enqueue"))  # the tasks below start from this context
    turns = [f"run_{n}" for n in range(1, 6)]
    tasks = []
    for run_id in turns:
        tasks.append(asyncio.create_task(_turn(sessions, run_id, taken)))
        await _queued(sessions, len(tasks))  # this one is in the line before the next comes

    sessions.store.sessions.unlock("alice", "busy", "run_0")
    await asyncio.wait_for(asyncio.gather(*tasks), 30)

    assert taken == turns


async def test_a_waiting_turn_counts_its_time_in_the_line(sessions: SessionService) -> None:
    assert await sessions.store.sessions.lock("alice", "busy", "run_0", lease_seconds=60)
    taken: list[str] = []
    BUSY_POLICY.set(BusyPolicy(mode="enqueue"))
    ahead = asyncio.create_task(_turn(sessions, "run_1", taken))
    await _queued(sessions, 1)
    BUSY_POLICY.set(BusyPolicy(mode="wait"))  # 0.5 s, behind a turn that waits for good

    with pytest.raises(SessionBusy):
        await _turn(sessions, "run_2", taken)

    ahead.cancel()
    await asyncio.gather(ahead, return_exceptions=True)
    assert taken == []


async def _queued_turn(sessions: SessionService, run_id: str, mode: BusyMode) -> None:
    """Begin a turn of ``busy`` under ``mode`` as a background response does."""
    agent = Agent(provider=ScriptedProvider("unused"), owner="alice")
    token = BUSY_POLICY.set(BusyPolicy(mode=mode))
    try:
        with queued_when_busy(True):
            await sessions.begin(
                agent,
                AgentRequest(user_message=run_id),
                owner="alice",
                profile="hermes-agent",
                run_id=run_id,
                name="busy",
            )
    finally:
        BUSY_POLICY.reset(token)


async def test_a_turn_that_queues_is_told_so_at_once_where_it_would_wait(
    sessions: SessionService,
) -> None:
    assert await sessions.store.sessions.lock("alice", "busy", "run_0", lease_seconds=60)
    for mode in ("wait", "enqueue"):
        with pytest.raises(SessionQueued):
            await asyncio.wait_for(_queued_turn(sessions, f"run_{mode}", mode), 5)
    # Behind a turn waiting in line here too, without waiting in the line itself.
    BUSY_POLICY.set(BusyPolicy(mode="enqueue"))
    taken: list[str] = []
    ahead = asyncio.create_task(_turn(sessions, "run_1", taken))
    await _queued(sessions, 1)
    with pytest.raises(SessionQueued):
        await asyncio.wait_for(_queued_turn(sessions, "run_2", "wait"), 5)
    # Refused at once all the same: a reject never waits.
    with pytest.raises(SessionBusy):
        await asyncio.wait_for(_queued_turn(sessions, "run_3", "reject"), 5)

    sessions.store.sessions.unlock("alice", "busy", "run_0")
    await asyncio.wait_for(ahead, 30)
    assert taken == ["run_1"]
    assert await sessions.store.sessions.lock("alice", "busy", "run_4", lease_seconds=60)
