"""A run that ended, asked about through another replica than the one that ran it: its events
replayed as a reconnecting client reads them (``Last-Event-ID``, ``after``) and a stop of it
answer as they do on the run's own replica."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.served import until
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    UPSTREAM,
    Key,
    Replica,
    deployed,
    deployment,
    key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def _ids(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> list[int]:
    """The ``id:`` of every event the stream at ``url`` sends before it ends (30 s at most)."""
    async with asyncio.timeout(30):
        answer = await http.get(url, headers=headers)
    assert answer.status_code == 200, answer.text
    return [int(line[4:]) for line in answer.text.splitlines() if line.startswith("id: ")]


async def _ended_run(
    http: httpx.AsyncClient, simulator: SimulatorServer, ran_by: Replica, seen_by: Replica
) -> str:
    """The id of a one-call run ``ran_by`` ran to its end, once ``seen_by`` says it ended."""
    simulator.state.script(UPSTREAM, Scenario(steps=[Step(reply=Reply(text="done"))]))
    started = await http.post(
        f"{ran_by.base_url}/v1/runs", json={"model": "hermes-agent", "input": "go"}
    )
    assert started.status_code == 202, started.text
    run_id: str = started.json()["id"]

    async def ended() -> bool:
        run: dict[str, Any] = (await http.get(f"{seen_by.base_url}/v1/runs/{run_id}")).json()
        return bool(run["status"] == "completed")

    assert await until(ended, server=seen_by)
    return run_id


async def test_an_event_stream_resumed_past_its_last_event_on_another_replica_ends_at_once(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    """An EventSource reconnects by itself once its stream closes, with the last id it saw:
    the run's ``run_finished``. Through another replica, that stream must end too, not wait
    for ever for an event after the end."""
    a, b = deployed["A"], deployed["B"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        run_id = await _ended_run(http, simulator, ran_by=a, seen_by=a)
        whole = await _ids(http, f"{b.base_url}/v1/runs/{run_id}/events", {})
        assert whole == list(range(len(whole)))
        last = str(whole[-1])
        for replica in (a, b):  # its own replica ends it at once: so must the other
            url = f"{replica.base_url}/v1/runs/{run_id}/events"
            assert await _ids(http, url, {"last-event-id": last}) == [], replica.name
            assert await _ids(http, f"{url}?after={int(last) + 5}", {}) == [], replica.name


async def test_a_stop_of_a_run_that_ended_is_a_409_through_any_replica(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    """README: ``/stop`` is a 202, or a 409 once the run ended; not a 404 ("no such run")
    when the stop reaches a replica that did not run it."""
    a, b = deployed["A"], deployed["B"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        run_id = await _ended_run(http, simulator, ran_by=a, seen_by=b)
        for replica in (a, b):
            stopped = await http.post(f"{replica.base_url}/v1/runs/{run_id}/stop")
            assert stopped.status_code == 409, (replica.name, stopped.text)
            assert stopped.json()["error"]["code"] == "run_finished", replica.name
