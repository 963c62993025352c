"""The simulator's Responses endpoint, read by the official openai SDK in strict mode."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import (
    FunctionToolParam,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseReasoningItem,
)

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED

WEATHER_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": False,
}
# Every key Open Responses' ResponseResource requires (wire-protocols.md §2.4).
RESPONSE_KEYS = set(
    """id object created_at completed_at status incomplete_details model previous_response_id
    instructions output error tools tool_choice truncation parallel_tool_calls text top_p
    presence_penalty frequency_penalty temperature top_logprobs reasoning usage
    max_output_tokens max_tool_calls store background service_tier metadata safety_identifier
    prompt_cache_key""".split()  # noqa: SIM905
)


@pytest.fixture
async def client(simulator: SimulatorServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=simulator.base_url + "/v1",
        api_key="sim",
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


@pytest.fixture
async def raw(simulator: SimulatorServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=simulator.base_url, timeout=10
    ) as http:
        yield http


def _script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


def _frames(body: str) -> list[tuple[str, dict[str, Any]]]:
    """Decode an SSE body into (event name, data) pairs, asserting the framing on the way."""
    assert "\r" not in body
    assert body.endswith("\n\n")
    frames = []
    for block in body.split("\n\n")[:-1]:
        lines = block.split("\n")
        assert len(lines) == 2, block  # one event line, one data line
        assert lines[0].startswith("event: ")
        assert lines[1].startswith("data: ")
        frames.append(
            (lines[0].removeprefix("event: "), json.loads(lines[1].removeprefix("data: ")))
        )
    return frames


async def test_response_object_carries_all_31_keys(
    simulator: SimulatorServer, raw: httpx.AsyncClient
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="Hi.")))
    answer = await raw.post("/v1/responses", json={"model": "m", "input": "Hello"})
    body = answer.json()
    assert set(body) == RESPONSE_KEYS
    assert len(RESPONSE_KEYS) == 31
    assert isinstance(body["created_at"], int)
    assert isinstance(body["completed_at"], int)
    assert body["status"] == "completed"


async def test_non_streaming_reply_is_a_completed_message(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="Paris.")))
    response = await client.responses.create(model="m", input="Capital of France?")
    assert response.status == "completed"
    assert response.output_text == "Paris."
    [message] = response.output
    assert isinstance(message, ResponseOutputMessage)
    assert message.id.startswith("msg_")
    assert message.status == "completed"
    assert message.content[0].type == "output_text"


async def test_tools_are_echoed_flat_with_strict(
    simulator: SimulatorServer, raw: httpx.AsyncClient
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="ok")))
    tool = {k: v for k, v in WEATHER_TOOL.items() if k != "strict"}
    answer = await raw.post("/v1/responses", json={"model": "m", "input": "x", "tools": [tool]})
    [echoed] = answer.json()["tools"]
    assert echoed == {**tool, "strict": True}


async def test_stream_follows_the_canonical_event_order(
    simulator: SimulatorServer, raw: httpx.AsyncClient
) -> None:
    reply = Reply(
        reasoning="Think.",
        text="Hello world",
        chunk_count=2,
        tool_calls=[ToolCallSpec(name="get_weather", arguments={"city": "Oslo"})],
    )
    _script(simulator, "m", Step(reply=reply))
    answer = await raw.post(
        "/v1/responses",
        json={"model": "m", "input": "hi", "stream": True, "tools": [WEATHER_TOOL]},
    )
    assert answer.headers["content-type"].startswith("text/event-stream")
    frames = _frames(answer.text)
    assert [name for name, _ in frames] == [data["type"] for _, data in frames]
    assert [data["sequence_number"] for _, data in frames] == list(range(len(frames)))
    assert [name for name, _ in frames] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = frames[0][1]["response"]
    assert set(created) == RESPONSE_KEYS
    assert (created["status"], created["output"], created["usage"]) == ("in_progress", [], None)
    assert set(frames[-1][1]["response"]) == RESPONSE_KEYS
    added_call = frames[15][1]["item"]
    assert added_call["call_id"] == frames[18][1]["item"]["call_id"]
    assert frames[10][1]["logprobs"] == []
    assert "[DONE]" not in answer.text  # OpenAI sends none


async def test_stream_iterates_as_typed_events(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="a" * 40, chunk_count=4)))
    stream = await client.responses.create(model="m", input="hi", stream=True)
    deltas, terminal = [], None
    async for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            terminal = event.response
    assert deltas == ["a" * 10] * 4
    assert terminal is not None
    assert terminal.output_text == "a" * 40


async def test_stream_helper_assembles_the_final_response(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(reasoning="Hmm.", text="Done.")))
    async with client.responses.stream(model="m", input="hi") as stream:
        async for _ in stream:
            pass
        response = await stream.get_final_response()
    assert response.output_text == "Done."
    assert [item.type for item in response.output] == ["reasoning", "message"]


async def test_reasoning_comes_first_as_a_summary_item(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(reasoning="Capital of France.", text="Paris.")))
    response = await client.responses.create(
        model="m", input="Capital?", reasoning={"effort": "low", "summary": "auto"}
    )
    reasoning, message = response.output
    assert isinstance(reasoning, ResponseReasoningItem)
    assert reasoning.id.startswith("rs_")
    assert [part.text for part in reasoning.summary] == ["Capital of France."]
    assert isinstance(message, ResponseOutputMessage)
    assert response.reasoning is not None
    assert response.reasoning.effort == "low"
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens > 0


async def test_single_function_call_is_a_completed_item(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    call = ToolCallSpec(name="get_weather", arguments={"city": "Oslo"}, id="call_abc")
    _script(simulator, "m", Step(reply=Reply(tool_calls=[call])))
    response = await client.responses.create(
        model="m",
        input="Weather in Oslo?",
        tools=[WEATHER_TOOL],
    )
    [item] = response.output
    assert isinstance(item, ResponseFunctionToolCall)
    assert (item.call_id, item.name, item.status) == ("call_abc", "get_weather", "completed")
    assert item.id is not None
    assert item.id.startswith("fc_")
    assert json.loads(item.arguments) == {"city": "Oslo"}


async def test_parallel_function_calls_stream_and_reassemble(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    calls = [
        ToolCallSpec(name="get_weather", arguments={"city": "Oslo"}),
        ToolCallSpec(name="get_weather", arguments={"city": "Lima"}),
    ]
    _script(simulator, "m", Step(reply=Reply(tool_calls=calls)))
    async with client.responses.stream(
        model="m",
        input="Oslo and Lima?",
        tools=[WEATHER_TOOL],
    ) as stream:
        async for _ in stream:
            pass
        response = await stream.get_final_response()
    items = [item for item in response.output if isinstance(item, ResponseFunctionToolCall)]
    assert [json.loads(item.arguments)["city"] for item in items] == ["Oslo", "Lima"]
    assert len({item.call_id for item in items}) == 2


async def test_repeated_prefix_reports_cached_tokens(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="One."), repeat=2))
    history: list[Any] = [{"role": "user", "content": "A long first question " * 20}]
    first = await client.responses.create(model="m", instructions="Be brief.", input=history)
    history += [
        {"role": "assistant", "content": "One."},
        {"role": "user", "content": "And then?"},
    ]
    second = await client.responses.create(model="m", instructions="Be brief.", input=history)
    assert first.usage is not None
    assert second.usage is not None
    assert first.usage.input_tokens_details.cached_tokens == 0
    cached = second.usage.input_tokens_details.cached_tokens
    assert 0 < cached < second.usage.input_tokens
    assert second.usage.input_tokens_details.cache_write_tokens == 0


async def test_max_output_tokens_reply_ends_incomplete(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="Cut sh", finish_reason="length")))
    stream = await client.responses.create(model="m", input="hi", stream=True)
    events = [event async for event in stream]
    terminal = events[-1]
    assert terminal.type == "response.incomplete"
    assert terminal.response.status == "incomplete"
    assert terminal.response.incomplete_details is not None
    assert terminal.response.incomplete_details.reason == "max_output_tokens"
    assert terminal.response.output[-1].status == "incomplete"  # type: ignore[union-attr]


async def test_content_filter_reply_ends_incomplete(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="No.", finish_reason="content_filter")))
    response = await client.responses.create(model="m", input="hi")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "content_filter"


async def test_function_call_output_without_its_call_is_refused(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="m",
            input=[
                {"role": "user", "content": "hi"},
                {"type": "function_call_output", "call_id": "call_x", "output": "42"},
            ],
        )
    assert "No tool call found for function call output with call_id call_x." in str(caught.value)


async def test_function_call_without_its_output_is_refused(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="m",
            input=[
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "call_y", "name": "f", "arguments": "{}"},
            ],
        )
    assert "No tool output found for function call call_y." in str(caught.value)


async def test_chat_style_tools_are_refused(client: openai.AsyncOpenAI) -> None:
    nested: Any = {"type": "function", "function": {"name": "f", "parameters": {}}}
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model="m", input="hi", tools=[nested])
    assert "tools[0].name" in str(caught.value)


async def test_missing_model_is_refused(raw: httpx.AsyncClient) -> None:
    answer = await raw.post("/v1/responses", json={"input": "hi"})
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


async def test_tool_round_trip_is_answered_by_the_default_policy(
    client: openai.AsyncOpenAI,
) -> None:
    first = await client.responses.create(
        model="sim-chat",
        input="Please call get_weather for 'Oslo'",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    [call] = first.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert json.loads(call.arguments) == {"city": "Oslo"}
    second = await client.responses.create(
        model="sim-chat",
        input=[
            {"role": "user", "content": "Please call get_weather for 'Oslo'"},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21C"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert "Sunny, 21C" in second.output_text


async def test_allowed_tools_restricts_what_the_default_policy_calls(
    client: openai.AsyncOpenAI,
) -> None:
    other: FunctionToolParam = {**WEATHER_TOOL, "name": "get_time"}
    response = await client.responses.create(
        model="sim-chat",
        input="hello",
        tools=[WEATHER_TOOL, other],
        tool_choice={
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "get_time"}],
        },
    )
    [call] = response.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert call.name == "get_time"


async def test_stream_error_is_an_openai_error_event(
    simulator: SimulatorServer, raw: httpx.AsyncClient
) -> None:
    fault = Fault(stream_error="server_error", disconnect_after=3)
    _script(simulator, "m", Step(reply=Reply(text="Hello there"), fault=fault))
    answer = await raw.post("/v1/responses", json={"model": "m", "input": "hi", "stream": True})
    frames = _frames(answer.text)
    assert len(frames) == 4
    name, data = frames[-1]
    assert name == "error"
    assert data == {
        "type": "error",
        "code": "server_error",
        "message": "Simulated in-stream error.",
        "param": None,
        "sequence_number": 3,
    }
    assert simulator.state.requests()[0].outcome == "dropped"


async def test_rate_limit_fault_is_a_429_with_retry_after(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(fault=Fault(status=429, retry_after=7)))
    with pytest.raises(openai.RateLimitError) as caught:
        await client.responses.create(model="m", input="hi")
    assert caught.value.response.headers["retry-after"] == "7"
