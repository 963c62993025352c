"""One instance name, one process: a replica started under the name of a live one refuses to
start, naming the setting, and the live one goes on (its runs untouched); a name whose holder
died is taken once its lease lapses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from server.replicas.liveness import InstanceTaken, Liveness
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port
from tests.redis_server import redis_url_or_skip
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
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url_or_skip())
    yield client
    await client.aclose()


def _serve_as(deployment: Deployment, instance: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    """``serve`` under ``instance`` (a data directory of its own), to its exit."""
    command = [sys.executable, "-m", "server.cli", "--log-level", "warning", "serve"]
    command += ["--config", str(deployment.config), "--port", str(free_port())]
    env = {
        **deployment.env,
        "HERMES_INSTANCE": instance,
        "HERMES_DATA_DIR": str(deployment.directory / f"data-{uuid.uuid4().hex[:8]}"),
    }
    return subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )


async def test_a_replica_started_under_a_live_replica_s_name_refuses_to_start(
    deployed: dict[str, Replica],  # noqa: F811
    deployment: Deployment,  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    a = deployed["A"]
    name = (deployment.data["A"] / "instance").read_text().strip()
    slow_answer(simulator)
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        async with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=CHAT) as s:
            run_id = s.headers["x-hermes-run-id"]
            lines = s.aiter_lines()  # kept: a dropped iterator would close the stream
            await first_text(lines)  # live in the database, as A's

            second = await asyncio.to_thread(_serve_as, deployment, name)

            assert second.returncode != 0, second.stderr
            assert "server.instance" in second.stderr, second.stderr
            assert "HERMES_INSTANCE" in second.stderr
            run: dict[str, Any] = (await http.get(f"{a.base_url}/v1/runs/{run_id}")).json()
            assert run["status"] == "running"  # not recovered as the namesake's previous life
            assert (await http.post(f"{a.base_url}/v1/runs/{run_id}/stop")).status_code == 202
        assert a.alive()
        assert (await http.get(f"{a.base_url}/v1/models")).status_code == 200


async def test_a_name_whose_holder_died_is_taken_once_its_lease_lapses(
    redis: aioredis.Redis,
) -> None:
    name = f"inst_{uuid.uuid4().hex[:8]}"
    dead = Liveness(redis, instance=name, lease_seconds=0.5)
    await dead.claim()  # and never renewed: killed
    again = Liveness(redis, instance=name, lease_seconds=0.5)
    async with asyncio.timeout(10):
        await again.claim()
    assert await redis.get(f"hermes:instance:{name}") == again.epoch.encode()


async def test_a_name_whose_holder_renews_it_is_refused(redis: aioredis.Redis) -> None:
    name = f"inst_{uuid.uuid4().hex[:8]}"
    live = Liveness(redis, instance=name, lease_seconds=0.5)
    await live.claim()

    async def nothing_else() -> None:
        return None

    keeping = asyncio.create_task(live.keep_lease(nothing_else))
    try:
        async with asyncio.timeout(10):
            with pytest.raises(InstanceTaken, match=r"server\.instance"):
                await Liveness(redis, instance=name, lease_seconds=0.5).claim()
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
    assert await redis.get(f"hermes:instance:{name}") == live.epoch.encode()
