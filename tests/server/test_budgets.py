"""Budgets and the per-run cost cap over HTTP, in process (docs/budgets.md): a profile's
``max_cost_usd`` ending a looping run honestly, keys' and end users' budgets refusing runs
with ``quota_exceeded`` and ending a run that spends what was left. (Across two replicas
against real serve processes: test_budgets_served.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.agent import AgentConfig
from hermes_core.persistence import sqlite_url
from hermes_core.pricing import DEFAULT_PRICES, Price, PriceTable
from server.app import create_app
from server.bootstrap import build_profiles
from server.config import load_config
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

PRICES = PriceTable({UPSTREAM_MODEL: Price(input=0.0, output=1000.0)})
"""1000 USD per million output tokens: a reply of 1000 output tokens costs 1 USD."""
MAX_COST_USD = 2.5
LOOKUP = Step(
    reply=Reply(
        tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "x"})], output_tokens=1000
    )
)
"""One call of a looping run: it looks a word up, and costs 1 USD."""


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadedServer, Services]]:
    database = sqlite_url(tmp_path_factory.mktemp("budgets") / "hermes.db")
    services = make_services(_simulator_server, database_url=database)
    services.profiles[0].config = AgentConfig(
        max_iterations=6, prices=PRICES, max_cost_usd=MAX_COST_USD
    )
    with ThreadedServer(create_app(services)) as server:
        yield server, services


@pytest.fixture
async def http(served: tuple[ThreadedServer, Services]) -> AsyncIterator[httpx.AsyncClient]:
    server, _ = served
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as client:
        yield client


def _auth(key: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **headers}


async def test_the_cost_cap_ends_a_looping_chat_run_budget_exhausted(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, LOOKUP.model_copy(update={"repeat": 20}))
    answer = await http.post(
        "/v1/chat/completions",
        headers=_auth(KEY_ALICE),
        json={"model": "hermes-agent", "messages": [{"role": "user", "content": "loop"}]},
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["choices"][0]["finish_reason"] == "length"  # not a clean "stop"
    hermes = body["hermes"]
    assert hermes["exit_reason"] == "budget_exhausted"
    assert hermes["model_calls"] == 3  # 3 USD reached the 2.5 cap: no fourth call
    assert "max_cost_usd 2.5 USD" in hermes["error"]
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 3


async def test_the_cost_cap_ends_a_looping_response_incomplete(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, LOOKUP.model_copy(update={"repeat": 20}))
    answer = await http.post(
        "/v1/responses",
        headers=_auth(KEY_ALICE),
        json={"model": "hermes-agent", "input": "loop"},
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["status"] == "incomplete"
    assert body["hermes"]["exit_reason"] == "budget_exhausted"
    assert "max_cost_usd" in body["hermes"]["error"]


def test_profiles_are_priced_by_the_configured_table_over_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(
        """\
providers:
  - {name: up, model: house-model, base_url: "http://127.0.0.1:9/v1", api_mode: chat_completions}
profiles:
  - {id: hermes-agent, providers: [up], max_cost_usd: 0.5}
  - {id: uncapped, providers: [up]}
prices:
  house-model: {input: 2, output: 8}
  gpt-4o: {input: 1, output: 3, cached_input: 0.5}
"""
    )
    capped, uncapped = build_profiles(load_config(path, {}))
    assert capped.config.max_cost_usd == 0.5
    assert uncapped.config.max_cost_usd is None
    prices = capped.config.prices
    assert prices is not None
    assert prices.price("house-model-v2") == Price(input=2, output=8)
    assert prices.price("gpt-4o-2024-08-06") == Price(input=1, output=3, cached_input=0.5)
    assert prices.price("claude-sonnet-4-20250514") == DEFAULT_PRICES["claude-sonnet-4"]
