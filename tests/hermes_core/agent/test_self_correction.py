"""The self-correction ladder and empty-reply recovery: the model fixes its own mistakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from hermes_core.agent import Agent
from hermes_core.agent.text_reply import EMPTY_NUDGE
from hermes_core.providers import base as p
from hermes_core.providers.base import ApiMode, ModelRequest
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.usage import Usage
from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.hermes_core.agent.conftest import ProviderFor, body_text, call, script, sent


def _tools(received: list[dict[str, Any]] | None = None) -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look a city's weather up.",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
            },
            "required": ["city"],
        },
    )
    async def weather(arguments: dict[str, Any], ctx: ToolContext) -> str:
        if received is not None:
            received.append(arguments)
        return f"sunny in {arguments['city']}"

    return registry


async def test_an_unknown_tool_gets_a_corrective_result_and_the_loop_goes_on(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "hallucinate",
        Step(reply=Reply(tool_calls=[call("get_forecast", city="Oslo")])),
        Step(reply=Reply(tool_calls=[call("weather", city="Oslo")])),
        Step(reply=Reply(text="Sunny in Oslo.")),
    )
    agent = Agent(provider_for(api_mode, "hallucinate"), tools=_tools())
    result = await agent.run_conversation("Weather in Oslo?")
    assert result["exit_reason"] == "completed"
    correction = result["messages"][2]["content"]
    assert correction.startswith("Tool 'get_forecast' does not exist. Available: [")
    assert "'weather'" in correction
    assert "Tool 'get_forecast' does not exist" in body_text(sent(simulator, "hallucinate")[1])


async def test_three_turns_of_unknown_tools_fail_the_run(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "lost", Step(reply=Reply(tool_calls=[call("imaginary")]), repeat=5))
    agent = Agent(provider_for("chat_completions", "lost"), tools=_tools())
    result = await agent.run_conversation("go")
    assert result["exit_reason"] == "failed"
    assert "do not exist 3 turns in a row" in result["error"]
    assert "imaginary" in result["error"]
    assert len(sent(simulator, "lost")) == 3


async def test_truncated_arguments_end_the_run_as_truncated_without_a_retry(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    cut = ToolCallSpec(name="weather", raw_arguments='{"city": "Reykja')
    script(simulator, "cut", Step(reply=Reply(tool_calls=[cut], finish_reason="length")))
    agent = Agent(provider_for(api_mode, "cut"), tools=_tools())
    result = await agent.run_conversation("Weather in Reykjavik?")
    assert result["exit_reason"] == "truncated"
    assert "max_tokens" in result["error"]
    assert "weather" in result["error"]
    assert len(sent(simulator, "cut")) == 1
    # The cut-off call never enters the transcript, so no call lacks its result.
    assert [m["role"] for m in result["messages"]] == ["user"]


async def test_invalid_json_is_retried_without_touching_the_history(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    broken = ToolCallSpec(name="weather", raw_arguments='{"city": "Oslo",}')
    script(
        simulator,
        "sloppy",
        Step(reply=Reply(tool_calls=[broken])),
        Step(reply=Reply(tool_calls=[call("weather", city="Oslo")])),
        Step(reply=Reply(text="Sunny.")),
    )
    agent = Agent(provider_for(api_mode, "sloppy"), tools=_tools())
    result = await agent.run_conversation("Weather?")
    assert result["exit_reason"] == "completed"
    first, retry, _ = sent(simulator, "sloppy")
    conversation_key = {"chat_completions": "messages", "codex_responses": "input"}.get(
        api_mode, "messages"
    )
    assert first[conversation_key] == retry[conversation_key]
    assert result["iterations"] == 2  # the retry did not cost an iteration
    assert result["model_calls"] == 3


async def test_persistently_invalid_json_is_returned_to_the_model_as_errors(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    broken = ToolCallSpec(name="weather", raw_arguments="{city: Oslo}")
    script(
        simulator,
        "stubborn",
        Step(reply=Reply(tool_calls=[broken]), repeat=4),
        Step(reply=Reply(text="Sorry.")),
    )
    agent = Agent(provider_for("chat_completions", "stubborn"), tools=_tools())
    result = await agent.run_conversation("Weather?")
    assert len(sent(simulator, "stubborn")) == 5
    tool_results = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1
    assert tool_results[0].startswith("Error: Invalid JSON arguments")
    assert result["exit_reason"] == "completed"


async def test_scalars_of_the_wrong_type_are_coerced_silently(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    received: list[dict[str, Any]] = []
    loose = ToolCallSpec(
        name="weather", raw_arguments='{"city": "Oslo", "days": "3", "metric": "true"}'
    )
    script(simulator, "loose", Step(reply=Reply(tool_calls=[loose])), Step(reply=Reply(text="ok")))
    agent = Agent(provider_for("chat_completions", "loose"), tools=_tools(received))
    await agent.run_conversation("Weather?")
    assert received == [{"city": "Oslo", "days": 3, "metric": True}]


# --- empty replies ------------------------------------------------------------------------------


async def test_an_empty_reply_after_housekeeping_uses_the_earlier_text(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    todos = {"todos": [{"id": "1", "content": "answer", "status": "completed"}]}
    script(
        simulator,
        "housekeeping",
        Step(reply=Reply(text="The answer is 7.", tool_calls=[call("todo", **todos)])),
        Step(reply=Reply()),
    )
    agent = Agent(provider_for("chat_completions", "housekeeping"))
    result = await agent.run_conversation("What is 3+4?")
    assert result["exit_reason"] == "completed"
    assert result["final_response"] == "The answer is 7."


async def test_an_empty_reply_after_tool_results_gets_one_nudge(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "quiet",
        Step(reply=Reply(tool_calls=[call("weather", city="Oslo")])),
        Step(reply=Reply()),
        Step(reply=Reply(text="Sunny in Oslo.")),
    )
    agent = Agent(provider_for(api_mode, "quiet"), tools=_tools())
    result = await agent.run_conversation("Weather?")
    assert result["exit_reason"] == "completed"
    assert result["final_response"] == "Sunny in Oslo."
    assert result["messages"][3:5] == [
        {"role": "assistant", "content": "(empty)"},
        {"role": "user", "content": EMPTY_NUDGE},
    ]
    assert EMPTY_NUDGE in body_text(sent(simulator, "quiet")[2])


async def test_a_second_empty_reply_fails_the_run_honestly(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(
        simulator,
        "silent",
        Step(reply=Reply(tool_calls=[call("weather", city="Oslo")])),
        Step(reply=Reply(), repeat=2),
    )
    agent = Agent(provider_for("chat_completions", "silent"), tools=_tools())
    result = await agent.run_conversation("Weather?")
    assert result["exit_reason"] == "failed"
    assert result["error"] == "The model returned an empty response."


async def test_an_empty_first_reply_fails_without_a_nudge(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "mute", Step(reply=Reply()))
    agent = Agent(provider_for("chat_completions", "mute"))
    result = await agent.run_conversation("Hello?")
    assert result["exit_reason"] == "failed"
    assert len(sent(simulator, "mute")) == 1


class _StreamsTextButReportsNone:
    """A provider whose final message drops the text it streamed (seen with some gateways)."""

    name = "odd"
    api_mode: ApiMode = "chat_completions"
    model = "odd-model"
    context_window = 100_000

    async def stream(self, request: ModelRequest) -> AsyncIterator[p.ProviderEvent]:
        yield p.ModelTextDelta(text="Streamed ")
        yield p.ModelTextDelta(text="answer.")
        yield p.ModelResponse(
            message={"role": "assistant", "content": None},
            finish_reason="stop",
            usage=Usage(),
            provider=self.name,
            model=self.model,
        )

    async def refresh_credentials(self) -> bool:
        return False

    async def aclose(self) -> None:
        return None


async def test_text_streamed_in_the_call_is_used_when_the_final_message_is_empty() -> None:
    agent = Agent(_StreamsTextButReportsNone())
    result = await agent.run_conversation("hi")
    assert result["exit_reason"] == "completed"
    assert result["final_response"] == "Streamed answer."
    assert result["messages"][-1] == {"role": "assistant", "content": "Streamed answer."}
