"""Crons whose runs continue a session, against a real ``serve`` process: each firing goes on
from what the session holds, and a firing that waits for its busy session holds up no other
cron of the replica."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.crons.scheduler import CRON_ID_KEY
from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.server.served import (
    Served,
    answer,
    http_client,
    last_messages,
    script,
    serving,
    simulated_provider,
    until,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

KEY = "sk-cron-sessions-0123456789"
UPSTREAM = "cron-sessions-upstream"
EVERY_SECOND = {"schedule": "* * * * * *", "timezone": "UTC", "model": "hermes-agent"}


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    config = (
        f"server:\n  api_keys: [{{principal: alice, key: {KEY}}}]\n"
        f"providers:\n{simulated_provider(_simulator_server, UPSTREAM)}"
        "profiles:\n  - {id: hermes-agent, providers: [sim]}\n"
    )
    with serving(tmp_path_factory.mktemp("cron-sessions"), config) as running:
        yield running


async def _cron(http: httpx.AsyncClient, **body: Any) -> str:
    made = await http.post("/v1/crons", json={**EVERY_SECOND, **body})
    assert made.status_code == 200, made.text
    cron_id: str = made.json()["id"]
    return cron_id


async def _runs_of(http: httpx.AsyncClient, cron_id: str) -> list[dict[str, Any]]:
    runs = (await http.get("/v1/runs", params={"limit": 100})).json()["data"]
    return [r for r in runs if (r["metadata"] or {}).get(CRON_ID_KEY) == cron_id]


async def test_each_firing_of_a_cron_with_a_session_goes_on_from_the_ones_before(
    served: Served, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, *[answer(f"Tick {n}.") for n in range(20)])
    async with http_client(served.base_url, KEY) as http:
        cron_id = await _cron(http, input="Any news?", session="ticks", instructions="Count.")

        async def three_ended() -> bool:
            runs = await _runs_of(http, cron_id)
            return len([r for r in runs if r["ended_at"]]) >= 3

        assert await until(three_ended, server=served)
        assert (await http.post(f"/v1/crons/{cron_id}/pause")).status_code == 200
        runs = await _runs_of(http, cron_id)
    assert len({r["session_id"] for r in runs}) == 1
    said = [(m["role"], m["content"]) for m in last_messages(simulator, UPSTREAM)[1:]]
    assert said[:4] == [
        ("user", "Any news?"),
        ("assistant", "Tick 0."),
        ("user", "Any news?"),
        ("assistant", "Tick 1."),
    ]


async def test_a_firing_waiting_for_its_busy_session_holds_up_no_other_cron(
    served: Served, simulator: SimulatorServer
) -> None:
    held = Step(reply=Reply(text="At last."), fault=Fault(first_byte_delay=60))
    script(simulator, UPSTREAM, held, *[answer("Tick.") for _ in range(60)])
    async with http_client(served.base_url, KEY) as http:
        long = await http.post(
            "/v1/runs", json={"model": "hermes-agent", "input": "Take long.", "session": "busy"}
        )
        assert long.status_code == 202, long.text
        assert await until(lambda: bool(simulator.state.requests(scenario=UPSTREAM)), server=served)
        # Its firings wait for the busy session (up to the session wait, then fail)...
        waiting = await _cron(http, input="Me too.", session="busy")
        # ...while another cron's firings start their runs every second meanwhile.
        other = await _cron(http, input="Elsewhere.")

        async def others_fired() -> bool:
            return len(await _runs_of(http, other)) >= 3

        fired = await until(others_fired, server=served, seconds=20)
        for cron_id in (waiting, other):
            assert (await http.delete(f"/v1/crons/{cron_id}")).status_code == 200
        assert (await http.post(f"/v1/runs/{long.json()['id']}/stop")).status_code == 202
    assert fired
