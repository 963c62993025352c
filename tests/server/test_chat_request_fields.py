"""Chat Completions request fields an agent cannot honour as OpenAI does: refused with a 400
that names them (as OpenAI refuses a parameter a model lacks), never silently dropped."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import SimulatorServer

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
