"""A busy session across two replicas on one PostgreSQL and one Redis, as real ``serve``
processes: a steer or an interrupt sent through one replica reaches the turn the other runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command, wait_until_healthy
from tests.redis_server import redis_url_or_skip
from tests.server.served import (
    Served,
    answer,
    http_client,
    pid_alive,
    postgres_database,
    until,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

UPSTREAM = f"steer-upstream-{uuid.uuid4().hex[:8]}"
KEY = f"sk-steer-{uuid.uuid4().hex}"
OWNER = f"alice-{uuid.uuid4().hex[:8]}"
STEER = "Also say the word pineapple."


@pytest.fixture(scope="module")
def replicas(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Served]]:
    """Replicas A and B of one deployment (each its own data directory and instance), for the
    module: its tests use sessions and runs of their own, and none stops a replica."""
    redis = redis_url_or_skip()
    directory = tmp_path_factory.mktemp("steer-replicas")
    config = directory / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: {OWNER}, key: {KEY}}}]
providers:
  - name: sim
    model: {UPSTREAM}
    base_url: "{_simulator_server.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    )
    with postgres_database() as postgres, ExitStack() as stack:
        common = {
            "DATABASE_URL": postgres,
            "REDIS_URL": redis,
            "HERMES_LEASE_SECONDS": "2",
            "HERMES_SHARED_DIR": str(directory / "shared"),
        }
        upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
        subprocess.run(upgrade, env={**os.environ, **common}, check=True, capture_output=True)
        started = []
        for name in "AB":
            port, log = free_port(), directory / f"replica-{name}.log"
            env = {**common, "HERMES_DATA_DIR": str(directory / f"data-{name}")}
            process = stack.enter_context(
                hermes_command(
                    "serve", "--config", str(config), port=port, env=env, log=log, wait=False
                )
            )
            started.append(
                (process, Served(f"http://127.0.0.1:{port}", directory, process.pid, log))
            )
        for process, replica in started:
            wait_until_healthy(replica.base_url, process=process, timeout=60)
        yield [replica for _, replica in started]


def slow_then(simulator: SimulatorServer, *then: Step) -> None:
    """The first model call streams for about three seconds (30 chunks): time enough for one
    request through the other replica to reach the turn (a round trip and a Redis message)."""
    slow = Step(reply=Reply(text="word " * 30, chunk_count=30), fault=Fault(chunk_delay=0.1))
    simulator.state.script(UPSTREAM, Scenario(steps=[slow, *then]))


async def started(simulator: SimulatorServer, replica: Served) -> None:
    assert await until(lambda: bool(simulator.state.requests(scenario=UPSTREAM)), server=replica)


def said(simulator: SimulatorServer, call: int) -> list[str]:
    messages = simulator.state.requests(scenario=UPSTREAM)[call].body["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "user"]


async def chat(
    http: httpx.AsyncClient, session: str, text: str, mode: str | None = None
) -> httpx.Response:
    """A chat turn of the named session, with ``mode`` as its busy policy; one with a mode
    comes while the session's first turn runs, its history going on from that turn's (one
    that forked it would wait for it)."""
    headers = {"x-hermes-session-id": session}
    said = [text]
    if mode:
        headers["x-hermes-session-busy"] = mode
        said = ["first", text]
    messages = [{"role": "user", "content": each} for each in said]
    body = {"model": "hermes-agent", "messages": messages}
    return await http.post("/v1/chat/completions", json=body, headers=headers)


async def test_a_run_is_steered_through_another_replica(
    simulator: SimulatorServer, replicas: list[Served]
) -> None:
    a, b = replicas
    slow_then(simulator, answer("Words, and pineapple."))
    async with http_client(a.base_url, KEY) as on_a, http_client(b.base_url, KEY) as on_b:
        begun = await on_a.post("/v1/runs", json={"model": "hermes-agent", "input": "first"})
        run_id = begun.json()["id"]
        await started(simulator, a)
        steered = await on_b.post(f"/v1/runs/{run_id}/steer", json={"input": STEER})

        async def ended() -> bool:
            found = await on_a.get(f"/v1/runs/{run_id}")
            return found.json()["ended_at"] is not None

        assert await until(ended, server=a)

    assert steered.status_code == 202, steered.text
    assert steered.json()["id"] == run_id
    assert said(simulator, 1)[-1] == STEER


async def test_a_chat_turn_steered_through_another_replica_names_the_run_it_went_into(
    simulator: SimulatorServer, replicas: list[Served]
) -> None:
    a, b = replicas
    slow_then(simulator, answer("Words, and pineapple."))
    async with http_client(a.base_url, KEY) as on_a, http_client(b.base_url, KEY) as on_b:
        first = asyncio.create_task(chat(on_a, "s", "first"))
        await started(simulator, a)
        steered = await chat(on_b, "s", STEER, "steer")
        done = await first

    assert steered.status_code == 409, steered.text
    assert steered.json()["error"]["code"] == "session_steered"
    assert done.headers["x-hermes-run-id"] in steered.json()["error"]["message"]
    assert done.json()["choices"][0]["message"]["content"].endswith("Words, and pineapple.")
    assert said(simulator, 1)[-1] == STEER


async def test_a_chat_turn_through_another_replica_interrupts_the_running_one(
    simulator: SimulatorServer, replicas: list[Served]
) -> None:
    a, b = replicas
    slow_then(simulator, answer("Second."))
    async with http_client(a.base_url, KEY) as on_a, http_client(b.base_url, KEY) as on_b:
        first = asyncio.create_task(chat(on_a, "i", "first"))
        await started(simulator, a)
        second = await chat(on_b, "i", "second", "interrupt")
        stopped = await first

    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "Second."
    assert stopped.json()["hermes"]["exit_reason"] == "interrupted"
    assert pid_alive(a.pid)
