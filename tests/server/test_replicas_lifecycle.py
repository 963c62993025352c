"""A run's life across replicas at its edges: stopped through another replica in its first
milliseconds (before its row is in the database), and ended for readers elsewhere when its
replica dies and comes back under its own name (#28, points 4 and 5)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.processes import wait_until_healthy
from tests.server.served import until
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    LEASE_SECONDS,
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


def interrupted(http: httpx.AsyncClient, replica: Replica, run_id: str) -> Any:
    """Whether ``replica`` says the run ended ``interrupted`` (for :func:`until`)."""

    async def check() -> bool:
        run: dict[str, Any] = (await http.get(f"{replica.base_url}/v1/runs/{run_id}")).json()
        return run.get("status") == "interrupted"

    return check


@pytest.fixture
def restart(deployment: Deployment) -> Any:  # noqa: F811
    """Start a replica again under its old name (its own data dir, as it had it)."""

    def start(replica: Replica) -> Replica:
        return deployment.start(replica.name, again=True)

    return start


async def test_a_run_stopped_through_another_replica_as_soon_as_its_id_is_known_is_interrupted(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    a, b = deployed["A"], deployed["B"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        for attempt in range(10):
            slow_answer(simulator)
            async with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=CHAT) as s:
                run_id = s.headers["x-hermes-run-id"]
                # At once: the run's row is not in the database yet, its reservation is.
                stopped = await http.post(f"{b.base_url}/v1/runs/{run_id}/stop")
                assert stopped.status_code == 202, (attempt, stopped.text)
                frames = [line async for line in s.aiter_lines() if line.startswith("data: {")]
            assert json.loads(frames[-1][6:])["hermes"]["exit_reason"] == "interrupted"
            assert await until(interrupted(http, b, run_id), server=b), attempt


async def test_a_response_cancelled_through_another_replica_as_soon_as_it_begins_is_cancelled(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    a, b = deployed["A"], deployed["B"]
    body = {"model": "hermes-agent", "input": "go", "stream": True, "background": True}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        for attempt in range(5):
            slow_answer(simulator)
            async with http.stream("POST", f"{a.base_url}/v1/responses", json=body) as s:
                lines = s.aiter_lines()
                first = await anext(line async for line in lines if line.startswith("data: "))
                response_id = json.loads(first[6:])["response"]["id"]
                cancelled = await http.post(f"{b.base_url}/v1/responses/{response_id}/cancel")
                assert cancelled.status_code == 200, (attempt, cancelled.text)
                assert cancelled.json()["status"] == "cancelled", attempt


async def test_a_stream_resumed_elsewhere_ends_when_its_replica_restarts_under_its_name(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
    restart: Any,
) -> None:
    slow_answer(simulator)
    a, c = deployed["A"], deployed["C"]
    body = {"model": "hermes-agent", "input": "go", "stream": True, "background": True}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        seen: list[dict[str, Any]] = []
        async with http.stream("POST", f"{a.base_url}/v1/responses", json=body) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    seen.append(json.loads(line[6:]))
                    if seen[-1]["type"] == "response.output_text.delta" and len(seen) > 5:
                        break  # a background response goes on without its first reader
        response_id = seen[0]["response"]["id"]
        last = seen[-1]["sequence_number"]

        resumed: list[dict[str, Any]] = []
        url = f"{c.base_url}/v1/responses/{response_id}?stream=true&starting_after={last}"
        async with http.stream("GET", url) as stream:
            assert stream.status_code == 200
            async with asyncio.timeout(30):  # a hang fails here, not in the suite's timeout
                async for line in stream.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    resumed.append(json.loads(line[6:]))
                    if len(resumed) == 3:
                        # Killed, and back at once under its name: before its lease runs out,
                        # so no other replica takes it for dead; its own start closes its run.
                        a.process.send_signal(signal.SIGKILL)
                        a.process.wait(timeout=10)
                        killed_at = time.monotonic()
                        again = restart(a)
        assert resumed[-1]["type"] == "response.failed"
        assert resumed[-1]["response"]["error"]["code"] == "server_error"
        assert time.monotonic() - killed_at < 20
        assert again.alive()
        assert c.alive()


async def test_a_replica_that_dies_twice_within_a_minute_is_recovered_within_its_lease_twice(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
    restart: Any,
) -> None:
    a, c = deployed["A"], deployed["C"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        for death in range(2):
            slow_answer(simulator)
            async with http.stream("POST", f"{a.base_url}/v1/chat/completions", json=CHAT) as s:
                run_id = s.headers["x-hermes-run-id"]
                await first_text(s.aiter_lines())  # its row is written: it is live in the database
                a.process.send_signal(signal.SIGKILL)
                a.process.wait(timeout=10)
                killed_at = time.monotonic()
            assert await until(interrupted(http, c, run_id), server=c, seconds=30), death
            # The lease (2 s) runs out, then the next look (every 2 s) finds it.
            assert time.monotonic() - killed_at < 4 * LEASE_SECONDS + 2, death
            a = restart(a)
            await asyncio.to_thread(wait_until_healthy, a.base_url, process=a.process, timeout=60)
