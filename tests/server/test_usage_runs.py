"""A run's usage and cost, in-process on SQLite: the answer's ``hermes.cost_usd`` (chat
completions and Responses), ``GET /v1/runs/{id}`` (with its end user) and the usage ledger
all agree with the run's ``usage`` at the profile's prices."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from hermes_core.persistence import sqlite_url
from hermes_core.pricing import Price, PriceTable
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

PRICES = PriceTable({UPSTREAM_MODEL: Price(input=1.0, output=2.0)})


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    url = sqlite_url(tmp_path_factory.mktemp("usage-runs") / "hermes.db")
    services = make_services(_simulator_server, database_url=url)
    profile = services.profiles[0]
    profile.config = dataclasses.replace(profile.config, prices=PRICES)
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(
    served: ThreadedServer, simulator: SimulatorServer
) -> AsyncIterator[httpx.AsyncClient]:
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Hello."), repeat=100)])
    )
    headers = {"authorization": f"Bearer {KEY_ALICE}", "x-hermes-memory-scope": "ann"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=served.base_url, timeout=30, headers=headers
    ) as client:
        yield client


def _cost(usage: dict[str, Any]) -> float:
    cost: float = (usage["input_tokens"] * 1.0 + usage["output_tokens"] * 2.0) / 1e6
    return cost


async def test_a_runs_cost_is_on_its_answer_its_record_and_the_ledger(
    http: httpx.AsyncClient,
) -> None:
    before = (await http.get("/v1/usage", params={"group_by": ""})).json()["totals"]
    chat = await http.post(
        "/v1/chat/completions",
        json={"model": "hermes-agent", "messages": [{"role": "user", "content": "Hi"}]},
    )
    assert chat.status_code == 200, chat.text
    hermes = chat.json()["hermes"]
    run = (await http.get(f"/v1/runs/{hermes['run_id']}")).json()
    after = (await http.get("/v1/usage", params={"group_by": ""})).json()["totals"]

    assert run["usage"]["input_tokens"] > 0
    assert hermes["cost_usd"] == pytest.approx(_cost(run["usage"]))
    assert run["cost_usd"] == hermes["cost_usd"]
    assert run["end_user"] == "ann"
    assert after["calls"] - before["calls"] == 1
    for name in ("input_tokens", "cache_read_tokens", "output_tokens", "reasoning_tokens"):
        assert after[name] - before[name] == run["usage"][name]
    assert after["cost_usd"] - before["cost_usd"] == pytest.approx(hermes["cost_usd"])


async def test_a_responses_answer_carries_its_cost(http: httpx.AsyncClient) -> None:
    answer = await http.post("/v1/responses", json={"model": "hermes-agent", "input": "Hi"})

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["hermes"]["cost_usd"] == pytest.approx(_cost(body["usage"]))
    assert body["hermes"]["cost_usd"] > 0
