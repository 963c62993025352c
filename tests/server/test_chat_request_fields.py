"""Chat Completions request fields an agent cannot honour as OpenAI does: refused with a 400
that names them (as OpenAI refuses a parameter a model lacks), never silently dropped."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


async def _refusal(client: openai.AsyncOpenAI, **fields: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="hermes-agent", messages=HELLO, **fields)
    return caught.value


async def test_legacy_functions_are_a_400_that_says_to_send_tools(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    functions: Any = [{"name": "get_weather", "parameters": {"type": "object"}}]
    error = await _refusal(client, functions=functions, function_call="auto")
    assert error.param == "functions"
    assert "tools" in error.message
    assert simulator.state.requests() == []  # the model never ran without the functions


async def test_a_legacy_function_call_alone_is_a_400_that_says_to_send_tool_choice(
    client: openai.AsyncOpenAI,
) -> None:
    error = await _refusal(client, function_call={"name": "get_weather"})
    assert error.param == "function_call"
    assert "tool_choice" in error.message


async def test_logprobs_are_refused_as_an_unsupported_parameter(
    client: openai.AsyncOpenAI,
) -> None:
    asked = await _refusal(client, logprobs=True)
    top = await _refusal(client, logprobs=True, top_logprobs=3)
    assert (asked.param, asked.code) == ("logprobs", "unsupported_parameter")
    assert top.param == "logprobs"


async def test_logprobs_false_is_accepted(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    completion = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, logprobs=False
    )
    assert completion.choices[0].logprobs is None


async def test_n_above_one_is_a_400_that_reads_as_a_sentence(client: openai.AsyncOpenAI) -> None:
    error = await _refusal(client, n=2)
    assert error.param == "n"
    assert "Value error" not in error.message


def _observation_script(simulator: SimulatorServer, *, chunk_count: int | None = None) -> None:
    reply = Reply(text="Thought: look it up\nObservation: made up", chunk_count=chunk_count)
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=reply)]))


async def test_the_answer_ends_before_the_first_stop_sequence(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _observation_script(simulator)
    completion = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, stop=["\nObservation:", "never"]
    )
    assert completion.choices[0].message.content == "Thought: look it up"
    assert completion.choices[0].finish_reason == "stop"


async def test_a_streamed_answer_ends_before_a_stop_sequence_split_across_deltas(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _observation_script(simulator, chunk_count=40)  # about one character a delta
    stream = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, stop="\nObservation:", stream=True
    )
    chunks = [chunk async for chunk in stream]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Thought: look it up"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


async def test_a_streamed_answer_ending_in_part_of_a_stop_sequence_shows_that_part(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _observation_script(simulator, chunk_count=40)
    stream = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, stop="made up!", stream=True
    )
    content = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert content == "Thought: look it up\nObservation: made up"


async def test_more_than_four_stop_sequences_is_a_400(client: openai.AsyncOpenAI) -> None:
    error = await _refusal(client, stop=["a", "b", "c", "d", "e"])
    assert error.param == "stop"


OPEN_PAGE: Any = [{"type": "function", "function": {"name": "open_page", "parameters": {}}}]


async def test_tool_choice_naming_a_function_the_request_lacks_is_a_400(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    choice: Any = {"type": "function", "function": {"name": "open_pgae"}}
    error = await _refusal(client, tools=OPEN_PAGE, tool_choice=choice)
    assert error.param == "tool_choice"
    assert "open_pgae" in error.message
    assert simulator.state.requests() == []


async def test_tool_choice_naming_a_declared_function_forces_it(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    choice: Any = {"type": "function", "function": {"name": "open_page"}}
    await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, tools=OPEN_PAGE, tool_choice=choice
    )
    assert simulator.state.requests()[0].body["tool_choice"] == choice


async def test_stream_options_without_a_stream_is_a_400_that_reads_as_a_sentence(
    client: openai.AsyncOpenAI,
) -> None:
    error = await _refusal(client, stream_options={"include_usage": True})
    assert error.param == "stream_options"
    assert "Value error" not in error.message


async def test_legacy_fields_that_ask_for_nothing_are_accepted(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    completion = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, functions=[], function_call="none"
    )
    assert completion.choices[0].finish_reason == "stop"


async def test_asking_for_audio_is_refused_and_text_alone_accepted(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    audio: Any = {"voice": "alloy", "format": "wav"}
    error = await _refusal(client, modalities=["text", "audio"], audio=audio)
    text = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, modalities=["text"]
    )
    assert (error.param, error.code) == ("modalities", "unsupported_parameter")
    assert text.choices[0].finish_reason == "stop"


LOOKUP_PAGE: Any = {"type": "function", "function": {"name": "fetch_page", "parameters": {}}}


def _allowed(mode: str, *names: str) -> Any:
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


async def test_allowed_tools_offer_the_model_only_those_of_the_clients_tools(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    await client.chat.completions.create(
        model="hermes-agent",
        messages=HELLO,
        tools=[*OPEN_PAGE, LOOKUP_PAGE],
        tool_choice=_allowed("required", "open_page"),
    )
    first = simulator.state.requests()[0].body
    assert [tool["function"]["name"] for tool in first["tools"]] == ["open_page"]
    assert first["tool_choice"] == "required"


async def test_allowed_tools_naming_a_function_the_request_lacks_is_a_400(
    client: openai.AsyncOpenAI,
) -> None:
    error = await _refusal(client, tools=OPEN_PAGE, tool_choice=_allowed("auto", "nope"))
    assert error.param == "tool_choice"
