"""A run its cost cap stops between a tool's result and the model's next word, as a client
sees it through the official SDK: never an empty answer, but a short notice saying why, and
the run's honest ending kept (finish_reason ``length``, a Response ``incomplete``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import openai
import pytest

from hermes_core.agent import AgentConfig
from hermes_core.persistence import sqlite_url
from hermes_core.pricing import Price, PriceTable
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

PRICES = PriceTable({UPSTREAM_MODEL: Price(input=0.0, output=1000.0)})
"""1000 USD per million output tokens: a reply of 1000 output tokens costs 1 USD."""
LOOKUP = Step(
    reply=Reply(
        tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "x"})], output_tokens=1000
    ),
    repeat=20,
)
"""A looping run's calls: each looks a word up, and costs 1 USD."""
NOTICE = (
    "The agent reached a spending limit before finishing. "
    "The run's cost cap (max_cost_usd 2.5 USD) is reached: it has spent 3.0000 USD."
)


@pytest.fixture(scope="module")
def capped(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    database = sqlite_url(tmp_path_factory.mktemp("cost-cap") / "hermes.db")
    services = make_services(_simulator_server, database_url=database)
    services.profiles[0].config = AgentConfig(max_iterations=6, prices=PRICES, max_cost_usd=2.5)
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def sdk(capped: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=capped.base_url + "/v1",
        api_key=KEY_ALICE,
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        yield client


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


@pytest.mark.parametrize("stream", [False, True])
async def test_a_chat_run_stopped_by_its_cost_cap_answers_why(
    sdk: openai.AsyncOpenAI, simulator: SimulatorServer, stream: bool
) -> None:
    script(simulator, LOOKUP)

    if stream:
        chunks = await sdk.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "loop"}], stream=True
        )
        seen = [c async for c in chunks if c.choices]
        text = "".join(c.choices[0].delta.content or "" for c in seen)
        finish = seen[-1].choices[0].finish_reason
    else:
        completion = await sdk.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "loop"}]
        )
        text = completion.choices[0].message.content or ""
        finish = completion.choices[0].finish_reason

    assert text == NOTICE
    assert finish == "length"  # never a clean "stop"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 3  # no fourth call


async def test_a_response_stopped_by_its_cost_cap_is_incomplete_and_says_why(
    sdk: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(simulator, LOOKUP)

    response = await sdk.responses.create(model="hermes-agent", input="loop")

    assert response.status == "incomplete"
    assert response.output_text == NOTICE
