"""A stop sent to another replica than the one that ran the run answers as the run's own
replica would."""

from __future__ import annotations

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


async def test_a_stop_of_a_run_that_ended_is_a_409_through_any_replica(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    """README: ``/stop`` is a 202, or a 409 once the run ended; not a 404 ("no such run")
    when the stop reaches a replica that did not run it."""
    a, b = deployed["A"], deployed["B"]
    simulator.state.script(UPSTREAM, Scenario(steps=[Step(reply=Reply(text="done"))]))
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:
        started = await http.post(
            f"{a.base_url}/v1/runs", json={"model": "hermes-agent", "input": "go"}
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["id"]

        async def ended() -> bool:
            run: dict[str, Any] = (await http.get(f"{b.base_url}/v1/runs/{run_id}")).json()
            return bool(run["status"] == "completed")

        assert await until(ended, server=b)
        for replica in (a, b):
            stopped = await http.post(f"{replica.base_url}/v1/runs/{run_id}/stop")
            assert stopped.status_code == 409, (replica.name, stopped.text)
            assert stopped.json()["error"]["code"] == "run_finished", replica.name
