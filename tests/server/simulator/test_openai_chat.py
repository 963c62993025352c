"""The simulator's Chat Completions endpoint, read by the official openai SDK in strict mode."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


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


def _script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


async def test_non_streaming_reply_carries_text_reasoning_and_usage(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="Paris.", reasoning="Capital of France.")))
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Capital of France?"}]
    )
    choice = completion.choices[0]
    assert choice.message.content == "Paris."
    assert choice.finish_reason == "stop"
    assert (choice.message.model_extra or {})["reasoning_content"] == "Capital of France."
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details is not None
    assert (completion.usage.completion_tokens_details.reasoning_tokens or 0) > 0


async def test_non_streaming_reply_takes_the_time_its_stream_would_have(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    reply = Reply(text="a" * 40, chunk_count=4)
    _script(simulator, "m", Step(reply=reply, fault=Fault(chunk_delay=0.1)))
    started = time.monotonic()
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "a" * 40
    assert time.monotonic() - started >= 0.3  # the gaps between its four text frames at least


async def test_non_streaming_reply_fails_where_its_stream_would_have(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    reply = Reply(text="a" * 40, chunk_count=4)
    _script(
        simulator,
        "m",
        Step(reply=reply, fault=Fault(stream_error="server_error")),
        Step(reply=reply, fault=Fault(disconnect_after=2)),
    )
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=messages)
    with pytest.raises(openai.APIConnectionError):
        await client.chat.completions.create(model="m", messages=messages)
    assert [r.outcome for r in simulator.state.requests(scenario="m")] == ["error", "dropped"]


async def test_stream_splits_text_into_the_requested_number_of_chunks(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(reply=Reply(text="a" * 100, chunk_count=20)))
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
    assert len([p for p in pieces if p]) == 20
    assert "".join(p or "" for p in pieces) == "a" * 100


async def test_stream_sends_one_usage_chunk_only_when_asked(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    for include in (True, False):
        stream = await client.chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": include},
        )
        usage_chunks = [chunk async for chunk in stream if chunk.usage is not None]
        assert len(usage_chunks) == (1 if include else 0)
        if include:
            assert usage_chunks[0].choices == []


async def test_parallel_tool_calls_stream_with_indexes_and_reassemble(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    calls = [
        ToolCallSpec(name="get_weather", arguments={"city": "Paris"}),
        ToolCallSpec(name="get_weather", arguments={"city": "Oslo"}),
    ]
    _script(simulator, "m", Step(reply=Reply(tool_calls=calls)))
    async with client.chat.completions.stream(
        model="m",
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    ) as stream:
        completion = await stream.get_final_completion()
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "tool_calls"
    assert [call.function.arguments for call in message.tool_calls or []] == [
        '{"city":"Paris"}',
        '{"city":"Oslo"}',
    ]


async def test_truncated_arguments_end_with_finish_reason_length(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    call = ToolCallSpec(name="get_weather", raw_arguments='{"city": "Par')
    _script(simulator, "m", Step(reply=Reply(tool_calls=[call], finish_reason="length")))
    completion = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].finish_reason == "length"
    tool_calls = completion.choices[0].message.tool_calls or []
    assert tool_calls[0].function.arguments == '{"city": "Par'  # type: ignore[union-attr]


async def test_default_policy_calls_a_tool_the_user_names(client: openai.AsyncOpenAI) -> None:
    completion = await client.chat.completions.create(
        model="unscripted",
        messages=[{"role": "user", "content": "Use get_weather for 'Lima' please"}],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    tool_calls = completion.choices[0].message.tool_calls or []
    assert tool_calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert tool_calls[0].function.arguments == '{"city":"Lima"}'  # type: ignore[union-attr]


async def test_default_policy_summarises_a_tool_result(client: openai.AsyncOpenAI) -> None:
    completion = await client.chat.completions.create(
        model="unscripted",
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
        ],
    )
    assert completion.choices[0].message.content == "The tool returned: sunny, 21 C"


async def test_tool_calls_without_results_are_refused_like_the_real_api(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="any",
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "again"},
            ],
        )
    assert "c1" in caught.value.message


async def test_rate_limit_fault_sends_retry_after(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "m", Step(fault=Fault(status=429, retry_after=3)), Step())
    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert caught.value.response.headers["retry-after"] == "3"
    # The next step answers normally: faults are per call.
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


async def test_repeated_prefix_is_reported_as_cached_tokens(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    system = {"role": "system", "content": "Be brief. " * 100}
    first = await client.chat.completions.create(
        model="m",
        messages=[system, {"role": "user", "content": "one"}],  # type: ignore[list-item]
    )
    second = await client.chat.completions.create(
        model="m",
        messages=[system, {"role": "user", "content": "two"}],  # type: ignore[list-item]
    )
    assert first.usage
    assert first.usage.prompt_tokens_details
    assert second.usage
    assert second.usage.prompt_tokens_details
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    # The system message (1,000 characters, ~250 tokens) is cached; the new question is not.
    cached = second.usage.prompt_tokens_details.cached_tokens or 0
    assert 250 <= cached < second.usage.prompt_tokens


async def test_prefixes_below_the_minimum_are_never_cached(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    simulator.state.cache.min_cacheable_tokens = 1024
    messages = [{"role": "user", "content": "short prompt"}]
    for _ in range(2):
        completion = await client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        assert completion.usage
        assert completion.usage.prompt_tokens_details
        assert completion.usage.prompt_tokens_details.cached_tokens == 0


async def test_control_api_scripts_over_http_and_lists_recorded_requests(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=simulator.base_url) as http:
        put = await http.put(
            "/_sim/scenarios/remote", json={"steps": [{"reply": {"text": "scripted remotely"}}]}
        )
        assert put.status_code == 200
        completion = await client.chat.completions.create(
            model="remote", messages=[{"role": "user", "content": "x"}]
        )
        assert completion.choices[0].message.content == "scripted remotely"
        recorded = (await http.get("/_sim/requests", params={"scenario": "remote"})).json()["data"]
        bad = await http.put("/_sim/scenarios/x", json={"steps": [{"reply": {"txt": 1}}]})
    assert [r["outcome"] for r in recorded] == ["completed"]
    assert recorded[0]["headers"]["authorization"] == "Bearer sim"
    assert bad.status_code == 400


async def test_scenario_header_selects_the_script_whatever_the_model(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, "by-header", Step(reply=Reply(text="from the header's script")))
    completion = await client.chat.completions.create(
        model="some-real-model-id",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={"x-sim-scenario": "by-header"},
    )
    assert completion.choices[0].message.content == "from the header's script"


async def test_scenario_with_an_api_key_refuses_other_keys(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    simulator.state.script("guarded", Scenario(api_key="right", steps=[Step()]))
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(
            model="guarded", messages=[{"role": "user", "content": "x"}]
        )
    good = client.with_options(api_key="right")
    await good.chat.completions.create(model="guarded", messages=[{"role": "user", "content": "x"}])
