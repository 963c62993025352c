"""Budgets and the per-run cost cap over HTTP, in process (docs/budgets.md): a profile's
``max_cost_usd`` ending a looping run honestly, keys' and end users' budgets refusing runs
with ``quota_exceeded`` and ending a run that spends what was left. (Across two replicas
against real serve processes: test_budgets_served.py.)"""

from __future__ import annotations

import calendar
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
from server.budgets.allowance import Periods, utc
from server.config import load_config
from server.http.auth import Budget, KeyRing, Principal
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

PRICES = PriceTable({UPSTREAM_MODEL: Price(input=0.0, output=1000.0)})
"""1000 USD per million output tokens: a reply of 1000 output tokens costs 1 USD."""
MAX_COST_USD = 2.5
LOOKUP = Step(
    reply=Reply(
        tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "x"})], output_tokens=1000
    )
)
"""One call of a looping run: it looks a word up, and costs 1 USD."""
ANSWER = Step(reply=Reply(text="Done.", output_tokens=1000))
"""A run's one call: 1000 tokens and more (the prompt), 1 USD."""
KEY_DORA = "sk-dora-0123456789abcdef"
"""500 tokens a day."""
KEY_ERIN = "sk-erin-0123456789abcdef"
"""1.5 USD a month."""
KEY_FRED = "sk-fred-0123456789abcdef"
"""3000 tokens a day: a run's first call spends about 2150 (1000 out, the rest in)."""


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadedServer, Services]]:
    database = sqlite_url(tmp_path_factory.mktemp("budgets") / "hermes.db")
    keyring = KeyRing(
        {
            KEY_ALICE: Principal(
                "alice", trusted_front_end=True, end_user_budget=Budget(tokens_per_day=500)
            ),
            KEY_BOB: "bob",
            KEY_DORA: Principal("dora", budget=Budget(tokens_per_day=500)),
            KEY_ERIN: Principal("erin", budget=Budget(cost_per_month_usd=1.5)),
            KEY_FRED: Principal("fred", budget=Budget(tokens_per_day=3000)),
        }
    )
    services = make_services(_simulator_server, database_url=database, keyring=keyring)
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


async def _chat(
    http: httpx.AsyncClient, key: str, content: str = "hello", **headers: str
) -> httpx.Response:
    return await http.post(
        "/v1/chat/completions",
        headers=_auth(key, **headers),
        json={"model": "hermes-agent", "messages": [{"role": "user", "content": content}]},
    )


def _quota_error(answer: httpx.Response, budget: str) -> str:
    """The 429's message, checked to be a quota error that names ``budget``."""
    assert answer.status_code == 429, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["type"]) == ("quota_exceeded", "insufficient_quota")
    message: str = error["message"]
    assert message.startswith(budget), message
    reset = message.rsplit("resets at ", 1)[1].rstrip(".")
    assert reset.endswith("T00:00:00Z")
    assert 0 < int(answer.headers["retry-after"]) <= 31 * 86_400
    return message


async def test_a_daily_token_budget_refuses_the_next_run_and_no_other_keys(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, ANSWER.model_copy(update={"repeat": 3}))
    assert (await _chat(http, KEY_DORA)).status_code == 200  # 1000+ tokens of 500
    message = _quota_error(await _chat(http, KEY_DORA), "The daily token budget of this API key")
    assert "(500 tokens per UTC day) is used up" in message
    assert (await _chat(http, KEY_BOB)).status_code == 200  # another key: no budget
    streamed = await http.post(
        "/v1/responses",
        headers=_auth(KEY_DORA),
        json={"model": "hermes-agent", "input": "hi", "stream": True},
    )
    _quota_error(streamed, "The daily token budget of this API key")  # before any stream


async def test_an_end_users_daily_budget_refuses_only_that_end_user(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, ANSWER.model_copy(update={"repeat": 4}))
    scope = "x-hermes-memory-scope"
    assert (await _chat(http, KEY_ALICE, **{scope: "ursula"})).status_code == 200
    _quota_error(
        await _chat(http, KEY_ALICE, **{scope: "ursula"}),
        "The daily token budget of end user 'ursula'",
    )
    assert (await _chat(http, KEY_ALICE, **{scope: "victor"})).status_code == 200
    assert (await _chat(http, KEY_ALICE)).status_code == 200  # the key's own runs: no budget


async def test_a_monthly_cost_budget_refuses_the_run_after_it_is_spent(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, ANSWER.model_copy(update={"repeat": 3}))
    assert (await _chat(http, KEY_ERIN)).status_code == 200  # 1 USD of 1.5
    assert (await _chat(http, KEY_ERIN)).status_code == 200  # 0.5 left: it may start
    message = _quota_error(await _chat(http, KEY_ERIN), "The monthly cost budget of this API key")
    assert "(1.50 USD per UTC calendar month) is used up (2.00 USD spent this month)" in message


async def test_a_run_that_spends_what_was_left_of_a_budget_ends_budget_exhausted(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, LOOKUP.model_copy(update={"repeat": 20}))
    answer = await _chat(http, KEY_FRED, "loop")
    assert answer.status_code == 200, answer.text
    hermes = answer.json()["hermes"]
    assert hermes["exit_reason"] == "budget_exhausted"
    assert hermes["model_calls"] == 2  # some 4300 tokens of 3000: before the 2.5 USD cost cap
    assert hermes["error"].startswith(
        "This run used up what was left of the daily token budget of this API key "
        "(3000 tokens per UTC day): it resets at "
    )
    _quota_error(await _chat(http, KEY_FRED), "The daily token budget of this API key")


def test_budget_periods_are_utc_days_and_calendar_months() -> None:
    new_years_eve = calendar.timegm((2026, 12, 31, 23, 59, 30))
    periods = Periods.at(new_years_eve)
    assert (periods.today, periods.month_start) == ("2026-12-31", "2026-12-01")
    assert utc(periods.day_ends) == utc(periods.month_ends) == "2027-01-01T00:00:00Z"
    february = Periods.at(calendar.timegm((2028, 2, 10, 0, 0, 0)))
    assert utc(february.day_ends) == "2028-02-11T00:00:00Z"
    assert utc(february.month_ends) == "2028-03-01T00:00:00Z"
