"""What a cron tells of its latest firing, against a real ``serve`` process: a firing that
started no run (its session busy, here) shows on the cron as its ``last_error`` until a later
firing starts one; a firing steered into its session's running run names that run, and makes
none of its own."""

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
    script,
    serving,
    simulated_provider,
    until,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

KEY = "sk-cron-outcomes-0123456789"
UPSTREAM = "cron-outcomes-upstream"
EVERY_SECOND = {"schedule": "* * * * * *", "timezone": "UTC"}


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    config = (
        f"server:\n  api_keys: [{{principal: alice, key: {KEY}}}]\n"
        f"providers:\n{simulated_provider(_simulator_server, UPSTREAM)}"
        "profiles:\n"
        "  - {id: rejecting, providers: [sim], session_busy: reject}\n"
        "  - {id: steering, providers: [sim], session_busy: steer}\n"
    )
    with serving(tmp_path_factory.mktemp("cron-outcomes"), config) as running:
        yield running


async def _cron(http: httpx.AsyncClient, **body: Any) -> str:
    made = await http.post("/v1/crons", json={**EVERY_SECOND, **body})
    assert made.status_code == 200, made.text
    assert made.json()["last_fired_at"] is None  # not fired yet
    cron_id: str = made.json()["id"]
    return cron_id


async def _held_run(
    http: httpx.AsyncClient, served: Served, simulator: SimulatorServer, **body: Any
) -> str:
    """A run of the session that stays running (its model call answers after a minute)."""
    held = Step(reply=Reply(text="At last."), fault=Fault(first_byte_delay=60))
    script(simulator, UPSTREAM, held, *[answer("Tick.") for _ in range(60)])
    long = await http.post("/v1/runs", json={"input": "Take long.", **body})
    assert long.status_code == 202, long.text
    assert await until(lambda: bool(simulator.state.requests(scenario=UPSTREAM)), server=served)
    run_id: str = long.json()["id"]
    return run_id


async def _last(http: httpx.AsyncClient, cron_id: str, status: str) -> dict[str, Any] | None:
    """The cron as ``GET /v1/crons/{id}`` shows it once its latest firing's status is
    ``status`` (None until then)."""
    cron: dict[str, Any] = (await http.get(f"/v1/crons/{cron_id}")).json()
    return cron if cron.get("last_status") == status else None


async def test_a_firing_that_started_no_run_shows_its_error_on_the_cron_until_one_starts_a_run(
    served: Served, simulator: SimulatorServer
) -> None:
    async with http_client(served.base_url, KEY) as http:
        long = await _held_run(http, served, simulator, model="rejecting", session="nightly")
        cron_id = await _cron(http, model="rejecting", input="Report.", session="nightly")

        failed: dict[str, Any] | None = None

        async def refused() -> bool:
            nonlocal failed
            failed = await _last(http, cron_id, "failed")
            return failed is not None

        assert await until(refused, server=served)
        assert failed is not None
        assert failed["last_run_id"] is None
        assert isinstance(failed["last_fired_at"], int)
        assert failed["last_error"]["code"] == "session_busy"
        assert failed["last_error"]["message"]
        listed = (await http.get("/v1/crons")).json()["data"]
        (same,) = [c for c in listed if c["id"] == cron_id]
        assert same["last_error"]["code"] == "session_busy"

        # A session of its own per firing: the next firing starts its run, and the error goes.
        changed = await http.post(f"/v1/crons/{cron_id}", json={"session": None})
        assert changed.status_code == 200, changed.text
        started: dict[str, Any] | None = None

        async def ran() -> bool:
            nonlocal started
            started = await _last(http, cron_id, "started")
            return started is not None

        assert await until(ran, server=served)
        assert (await http.post(f"/v1/crons/{cron_id}/pause")).status_code == 200
        assert started is not None
        assert started["last_error"] is None
        assert started["last_fired_at"] >= failed["last_fired_at"]
        run = (await http.get(f"/v1/runs/{started['last_run_id']}")).json()
        assert run["metadata"][CRON_ID_KEY] == cron_id
        assert (await http.post(f"/v1/runs/{long}/stop")).status_code == 202
        assert (await http.delete(f"/v1/crons/{cron_id}")).status_code == 200


async def test_a_firing_steered_into_its_sessions_running_run_names_that_run(
    served: Served, simulator: SimulatorServer
) -> None:
    async with http_client(served.base_url, KEY) as http:
        long = await _held_run(http, served, simulator, model="steering", session="live")
        cron_id = await _cron(http, model="steering", input="Also this.", session="live")
        steered: dict[str, Any] | None = None

        async def joined() -> bool:
            nonlocal steered
            steered = await _last(http, cron_id, "steered")
            return steered is not None

        assert await until(joined, server=served)
        assert (await http.post(f"/v1/crons/{cron_id}/pause")).status_code == 200
        assert steered is not None
        assert (steered["last_run_id"], steered["last_error"]) == (long, None)
        runs = (await http.get("/v1/runs", params={"limit": 100})).json()["data"]
        assert [r for r in runs if (r["metadata"] or {}).get(CRON_ID_KEY) == cron_id] == []
        assert (await http.post(f"/v1/runs/{long}/stop")).status_code == 202
        assert (await http.delete(f"/v1/crons/{cron_id}")).status_code == 200
