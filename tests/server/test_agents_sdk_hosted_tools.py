"""The OpenAI Agents SDK's hosted tools, unchanged, against a real ``serve`` process: its
``WebSearchTool``, ``CodeInterpreterTool`` and (hosted) ``ShellTool`` name tool types that the
server's own toolsets serve. The SDK must parse what comes back, run none of it itself, and
finish with the model's answer; a client function tool in the same run still reaches it (the
hosted items are sent back in its next request and accepted).

The server, its site and scripting are the hosted tools tests' (``test_responses_hosted_tools``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import pytest
from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from openai.types.responses import ResponseCodeInterpreterToolCall

from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.served import answer, call
from tests.server.test_responses_hosted_tools import (  # noqa: F401 (fixtures used by name)
    KEY,
    MODEL,
    HostedServer,
    hosted_server,
    hosted_site,
    needs_sandbox,
    script,
)

if TYPE_CHECKING:
    from agents import Agent

pytestmark = pytest.mark.slow

CITIES: list[str] = []


def get_weather(city: str) -> str:
    """The weather in a city."""
    CITIES.append(city)
    return f"21 °C in {city}"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # the SDK would upload traces to OpenAI
    CITIES.clear()


@pytest.fixture
async def sdk(
    hosted_server: HostedServer,  # noqa: F811 (the fixture imported above)
) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        http_client=DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=f"{hosted_server.base_url}/v1",
        api_key=KEY,
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        yield client


def agent(sdk: AsyncOpenAI, *tools: Any) -> Agent:
    from agents import Agent, OpenAIResponsesModel

    model = OpenAIResponsesModel(model=MODEL, openai_client=sdk)
    return Agent(name="assistant", instructions="Be brief.", model=model, tools=list(tools))


def raw_type(item: Any) -> str | None:
    """An item's type as the SDK kept it (a model, or a dict for some hosted items)."""
    raw = item.raw_item
    return raw.get("type") if isinstance(raw, dict) else getattr(raw, "type", None)


def raw_types(result: Any) -> list[str | None]:
    """The types of the items the run produced."""
    return [raw_type(item) for item in result.new_items]


async def test_web_search_tool_runs_unchanged_beside_a_client_function_tool(
    sdk: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    from agents import Runner, WebSearchTool, function_tool

    script(
        simulator,
        call("web_search", query="paris weather"),
        call("get_weather", city="Paris"),
        answer("It is 21 °C in Paris."),
    )
    result = await Runner.run(
        agent(sdk, WebSearchTool(), function_tool(get_weather)), "How warm is Paris?"
    )
    assert result.final_output == "It is 21 °C in Paris."
    assert CITIES == ["Paris"]
    assert "web_search_call" in raw_types(result)


async def test_web_search_tool_runs_unchanged_streamed(
    sdk: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    from agents import Runner, WebSearchTool

    script(simulator, call("web_search", query="paris weather"), answer("Mild."))
    result = Runner.run_streamed(agent(sdk, WebSearchTool()), "How warm is Paris?")
    async for _ in result.stream_events():
        pass
    assert result.final_output == "Mild."
    assert "web_search_call" in raw_types(result)


@needs_sandbox
async def test_code_interpreter_tool_runs_unchanged(
    sdk: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    from agents import CodeInterpreterTool, Runner

    script(simulator, call("code", code="print(6 * 7)"), answer("42."))
    tool = CodeInterpreterTool(
        tool_config={"type": "code_interpreter", "container": {"type": "auto"}}
    )
    result = await Runner.run(agent(sdk, tool), "What is 6 * 7?")
    assert result.final_output == "42."
    [run] = [i.raw_item for i in result.new_items if raw_type(i) == "code_interpreter_call"]
    assert isinstance(run, ResponseCodeInterpreterToolCall)
    assert [getattr(o, "logs", "").strip() for o in run.outputs or ()] == ["42"]


@needs_sandbox
async def test_hosted_shell_tool_runs_unchanged(
    sdk: AsyncOpenAI, simulator: SimulatorServer
) -> None:
    from agents import Runner, ShellTool

    script(simulator, call("shell", command="echo hello"), answer("It said hello."))
    tool = ShellTool(environment={"type": "container_auto"})
    result = await Runner.run(agent(sdk, tool), "Say hello in the shell.")
    assert result.final_output == "It said hello."
    types = raw_types(result)
    assert "shell_call" in types
    assert "shell_call_output" in types
