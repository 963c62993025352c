"""The OpenAI Agents SDK as a client of /v1/responses: a run that uses a server-side tool (which
the SDK must never see as a function call to execute) and a client function tool (which it
must see, run, and send back)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import openai
import pytest
from pydantic import BaseModel

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL

if TYPE_CHECKING:
    from agents import Agent

# The SDK is imported by these tests, not at collection: every test process collects every
# module, and the Agents SDK takes ~1.5 s of CPU to import (`make fast` hands a module's tests
# to one process: --dist loadscope).

CALLS: list[str] = []


def get_weather(city: str) -> str:
    """The weather in a city."""
    CALLS.append(city)
    return f"21 °C in {city}"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # the SDK would upload traces to OpenAI
    CALLS.clear()


def _script(simulator: SimulatorServer) -> None:
    steps = [
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "Paris"})])),
        Step(
            reply=Reply(tool_calls=[ToolCallSpec(name="get_weather", arguments={"city": "Paris"})])
        ),
        Step(reply=Reply(text="It is 21 °C in Paris.")),
    ]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))


def _agent(hermes: ThreadedServer, sdk: openai.AsyncOpenAI) -> Agent:
    from agents import Agent, OpenAIResponsesModel, function_tool

    model = OpenAIResponsesModel(model="hermes-agent", openai_client=sdk)
    weather = function_tool(get_weather)
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=[weather])


async def test_runner_run_completes_with_a_server_tool_and_a_client_tool(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    from agents import Runner

    _script(simulator)
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key=KEY_ALICE,
    ) as sdk:
        result = await Runner.run(_agent(hermes, sdk), "What is the weather in Paris?")
    assert result.final_output == "It is 21 °C in Paris."
    assert CALLS == ["Paris"]  # the client tool ran once; the server's lookup never reached it


async def test_runner_run_streamed_completes_too(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    from agents import Runner

    _script(simulator)
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key=KEY_ALICE,
    ) as sdk:
        result = Runner.run_streamed(_agent(hermes, sdk), "What is the weather in Paris?")
        async for _ in result.stream_events():
            pass
    assert result.final_output == "It is 21 °C in Paris."
    assert CALLS == ["Paris"]


class Forecast(BaseModel):
    city: str
    celsius: float


async def test_an_agent_with_an_output_type_gets_a_typed_final_output(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner

    steps = [
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "Paris"})])),
        Step(reply=Reply(text='{"city": "Paris", "celsius": 21}')),
    ]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key=KEY_ALICE,
    ) as sdk:
        model = OpenAIResponsesModel(model="hermes-agent", openai_client=sdk)
        agent = Agent(name="forecaster", model=model, output_type=Forecast)
        result = await Runner.run(agent, "How warm is Paris?")

    assert result.final_output == Forecast(city="Paris", celsius=21)
