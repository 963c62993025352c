"""Structured outputs in the loop: the answer is held back until it is checked against the
requested shape, shown once it has it, asked for again once when it has not, and a second
miss fails the run rather than pass off a non-conforming answer as a success."""

from __future__ import annotations

import json
from typing import Any

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import ExitReason, TextDelta
from hermes_core.providers import OutputFormat, ScriptedProvider, ScriptedReply
from hermes_core.providers.base import ApiMode
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.simulator import SimulatorServer
from tests.hermes_core.agent.conftest import ProviderFor, finished, run_events

WEATHER = OutputFormat(
    kind="json_schema",
    name="weather",
    schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["city", "celsius"],
        "additionalProperties": False,
    },
    strict=True,
)


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Read the thermometer.", parameters={"type": "object"})
    async def thermometer(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "21.5"

    return registry


async def test_a_structured_answer_after_a_tool_call_is_checked_then_shown_once() -> None:
    provider = ScriptedProvider(
        ScriptedReply(text="Let me look.", tool_calls=[("thermometer", {})]),
        '{"city": "Oslo", "celsius": 21.5}',
    )
    agent = Agent(provider, tools=_tools())
    events = await run_events(agent, AgentRequest(user_message="Weather?", output_format=WEATHER))

    end = finished(events)
    assert end.exit_reason is ExitReason.COMPLETED
    assert end.final_text == '{"city": "Oslo", "celsius": 21.5}'
    assert [e.text for e in events if isinstance(e, TextDelta)] == [end.final_text]
    assert all(request.output_format == WEATHER for request in provider.requests)
    system = provider.requests[0].messages[0]
    assert "JSON Schema (weather)" in str(system["content"])


async def test_an_answer_in_a_code_fence_is_taken_out_of_it() -> None:
    provider = ScriptedProvider('```json\n{"city": "Oslo", "celsius": 3}\n```')
    result = await Agent(provider).run_conversation("Weather?", output_format=WEATHER)

    assert result["final_response"] == '{"city": "Oslo", "celsius": 3}'


async def test_an_answer_off_the_schema_is_asked_for_again_once_naming_the_problem() -> None:
    provider = ScriptedProvider('{"city": "Oslo"}', '{"city": "Oslo", "celsius": 4}')
    agent = Agent(provider)
    events = await run_events(agent, AgentRequest(user_message="Weather?", output_format=WEATHER))

    assert finished(events).final_text == '{"city": "Oslo", "celsius": 4}'
    repair = provider.requests[1].messages[-1]
    assert repair["role"] == "user"
    assert "'celsius' is a required property" in str(repair["content"])
    assert [e.text for e in events if isinstance(e, TextDelta)] == [
        '{"city": "Oslo", "celsius": 4}'
    ]


async def test_a_second_miss_fails_the_run_instead_of_passing_the_answer_off() -> None:
    provider = ScriptedProvider("It is warm in Oslo.", "Really, it is warm.")
    events = await run_events(
        Agent(provider), AgentRequest(user_message="Weather?", output_format=WEATHER)
    )

    end = finished(events)
    assert end.exit_reason is ExitReason.FAILED
    assert end.final_text == ""
    assert "did not have the requested shape" in str(end.error)
    assert not [e for e in events if isinstance(e, TextDelta)]


async def test_json_object_wants_an_object_not_any_json() -> None:
    provider = ScriptedProvider("[1, 2]", '{"items": [1, 2]}')
    result = await Agent(provider).run_conversation(
        "List", output_format=OutputFormat(kind="json_object")
    )

    assert result["final_response"] == '{"items": [1, 2]}'
    assert "not a JSON object" in str(provider.requests[1].messages[-1]["content"])


WIRE_FORMAT = {
    "chat_completions": lambda body: body["response_format"]["json_schema"]["schema"],
    "codex_responses": lambda body: body["text"]["format"]["schema"],
    "anthropic_messages": lambda body: body["output_config"]["format"]["schema"],
}


async def test_every_api_mode_asks_the_upstream_for_the_shape_natively(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    provider = provider_for(api_mode, "shaped")
    result = await Agent(provider).run_conversation("Weather?", output_format=WEATHER)

    assert result["exit_reason"] == "completed"
    answer = json.loads(result["final_response"])
    assert set(answer) == {"city", "celsius"}
    (record,) = simulator.state.requests()
    body = record.body
    assert WIRE_FORMAT[api_mode](body) == WEATHER.schema


async def test_a_refusal_is_the_runs_answer_in_its_own_field_not_a_shape_miss() -> None:
    provider = ScriptedProvider(ScriptedReply(refusal="I can't help with that."))
    events = await run_events(
        Agent(provider), AgentRequest(user_message="Weather?", output_format=WEATHER)
    )

    end = finished(events)
    assert end.exit_reason is ExitReason.COMPLETED
    assert end.refusal == "I can't help with that."
    assert end.final_text == ""
    assert len(provider.requests) == 1  # no repair call
