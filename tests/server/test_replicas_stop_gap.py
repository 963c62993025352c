"""A stop for a run of another replica sent while that replica is not listening (its pub/sub
connection lost and not yet back) still reaches the run once it listens again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from server.replicas.broadcasts import STOP_CHANNEL
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.redis_cut import SubscriptionCutter
from tests.server.served import sse_data, until
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    Deployment,
    Key,
    Replica,
    deployed,
    deployment,
    first_text,
    key,
    slow_answer,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CHAT = {"model": "hermes-agent", "stream": True, "messages": [{"role": "user", "content": "go"}]}


@pytest.fixture
def cut_off(deployment: Deployment) -> Iterator[tuple[Replica, SubscriptionCutter]]:  # noqa: F811
    """A replica of the deployment reaching Redis through a :class:`SubscriptionCutter`."""
    with ExitStack() as stack:
        cutter = stack.enter_context(SubscriptionCutter(deployment.env["REDIS_URL"]))
        port, log = free_port(), deployment.directory / "replica-cut.log"
        env = {
            **deployment.env,
            "REDIS_URL": cutter.url,
            "HERMES_DATA_DIR": str(deployment.directory / "data-cut"),
        }
        serve = ("serve", "--config", str(deployment.config))
        process = stack.enter_context(hermes_command(*serve, port=port, env=env, log=log))
        yield Replica("cut", f"http://127.0.0.1:{port}", process, log), cutter


@pytest.fixture
async def redis(deployment: Deployment) -> AsyncIterator[aioredis.Redis]:  # noqa: F811
    client = aioredis.from_url(deployment.env["REDIS_URL"])
    yield client
    await client.aclose()


async def _listeners(redis: aioredis.Redis) -> int:
    [(_, count)] = await redis.pubsub_numsub(STOP_CHANNEL)
    return int(count)


async def test_a_stop_sent_while_the_running_replica_is_not_subscribed_reaches_it_when_it_is(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
    cut_off: tuple[Replica, SubscriptionCutter],
    redis: aioredis.Redis,
) -> None:
    owner, cutter = cut_off
    b = deployed["B"]
    slow_answer(simulator)  # a minute of words, unless stopped
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        async with http.stream("POST", f"{owner.base_url}/v1/chat/completions", json=CHAT) as s:
            run_id = s.headers["x-hermes-run-id"]
            lines = s.aiter_lines()
            await first_text(lines)  # its row is written: B finds it live
            listening = await _listeners(redis)
            cutter.cut()

            async def gone() -> bool:
                return await _listeners(redis) == listening - 1

            assert await until(gone, server=owner)
            stopped = await http.post(f"{b.base_url}/v1/runs/{run_id}/stop")
            assert stopped.status_code == 202, stopped.text
            cutter.restore()
            async with asyncio.timeout(30):  # the run's minute of words, had the stop been lost
                rest = sse_data("\n".join([line async for line in lines]))
        assert rest[-1]["hermes"]["exit_reason"] == "interrupted"

        async def recorded() -> bool:
            run: dict[str, Any] = (await http.get(f"{b.base_url}/v1/runs/{run_id}")).json()
            return run.get("status") == "interrupted"

        assert await until(recorded, server=b)
