"""A replica killed in a run's first moments, before the run's row was written (rows are written
behind, in batches): the conversation's lock it took must not outlive it by the lock's own lease
(hours). Recovering the replica, by another or by itself at restart, frees the locks it holds."""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from hermes_core.persistence import Store
from server.sessions.service import SessionService
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.databases import fresh_database
from tests.plain_http import TLS_UNUSED
from tests.server.served import until
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    LEASE_SECONDS,
    UPSTREAM,
    Key,
    Replica,
    deployed,
    deployment,
    key,
    slow_answer,
)

HOURS = 6 * 3600.0


@pytest.fixture
async def sqlite_url(tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database("sqlite", tmp_path) as url:
        yield url


async def test_recovering_a_dead_replica_frees_locks_of_runs_it_never_wrote(
    sqlite_url: str,
) -> None:
    dead = await Store.open(sqlite_url, instance="replica-a")
    alive = await Store.open(sqlite_url, instance="replica-b")
    try:
        # Replica A took the turn, then died before its run's row was written: no row at all.
        assert await dead.sessions.lock("alice", "talk", "run_unwritten", lease_seconds=HOURS)
        assert await alive.sessions.lock("alice", "other", "run_of_b", lease_seconds=HOURS)
        await dead.db.writer.flush()
        assert await dead.runs.get("alice", "run_unwritten") is None
        service = SessionService(alive)
        assert "replica-a" in await service.live_instances()  # the watch looks at it

        assert await service.recover("replica-a") == []  # no run of it to mark interrupted

        assert await alive.sessions.lock("alice", "talk", "run_next", lease_seconds=HOURS)
        # Another replica's lock is not touched.
        assert not await alive.sessions.lock("alice", "other", "run_x", lease_seconds=HOURS)
        assert "replica-a" not in await service.live_instances()
    finally:
        await dead.close()
        await alive.close()


async def test_a_replica_restarting_frees_the_locks_its_previous_life_left(
    sqlite_url: str,
) -> None:
    before = await Store.open(sqlite_url, instance="replica-a")
    try:
        assert await before.sessions.lock("alice", "talk", "run_unwritten", lease_seconds=HOURS)
        await before.db.writer.flush()
    finally:
        await before.close()
    restarted = await Store.open(sqlite_url, instance="replica-a")
    try:
        await SessionService(restarted).recover()  # what a start does
        assert await restarted.sessions.lock("alice", "talk", "run_next", lease_seconds=HOURS)
    finally:
        await restarted.close()


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_replica_killed_as_a_turn_begins_does_not_hold_its_conversation(
    deployed: dict[str, Replica],  # noqa: F811 (the fixture)
    key: Key,  # noqa: F811 (the fixture)
    simulator: SimulatorServer,
) -> None:
    slow_answer(simulator)  # should A get as far as the model, it does not finish meanwhile
    a, b = deployed["A"], deployed["B"]
    session = {"x-hermes-session-id": "cut-short"}
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    plain = {**body, "stream": False}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        async with http.stream(
            "POST", f"{a.base_url}/v1/chat/completions", json=body, headers=session
        ) as stream:
            # Killed as the headers arrive, before any frame: the lock is taken (in the
            # database, at once), the run's row most likely not yet written.
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(timeout=10)
            killed_at = time.monotonic()
            assert stream.status_code == 200
        # Whether or not A's call reached the model, the next turn's is answered at once.
        simulator.state.script(UPSTREAM, Scenario(steps=[Step(reply=Reply(text="Next turn."))]))
        answers: list[str] = []

        async def next_turn_served() -> bool:
            after = await http.post(
                f"{b.base_url}/v1/chat/completions", json=plain, headers=session
            )
            if after.status_code == 200:
                answers.append(after.json()["choices"][0]["message"]["content"])
            else:  # the dead run's lock, or its reservation against the key's limit
                code = after.json()["error"]["code"]
                assert code in ("session_busy", "rate_limit_exceeded"), after.text
            return after.status_code == 200

        assert await until(next_turn_served, server=b, seconds=30)
        # The lease (2 s) runs out, then the next look (every 2 s) finds it.
        assert time.monotonic() - killed_at < 4 * LEASE_SECONDS + 2
        assert answers == ["Next turn."]
    assert b.alive()
