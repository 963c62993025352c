"""Images in tool results at the simulator, through the official SDKs: each protocol's shape is
accepted and recorded, and the shapes the real APIs refuse are refused the same way."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED

PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
    "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
DATA_URL = f"data:image/png;base64,{PNG_B64}"
CALL: Any = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "chart", "arguments": "{}"},
}


@pytest.fixture
async def openai_client(simulator: SimulatorServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=simulator.base_url + "/v1",
        api_key="sim",
        max_retries=0,
    ) as sdk:
        yield sdk


@pytest.fixture
async def anthropic_client(simulator: SimulatorServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=simulator.base_url, api_key="sim", max_retries=0
    ) as sdk:
        yield sdk


def _answer(simulator: SimulatorServer, model: str) -> None:
    simulator.state.script(model, Scenario(steps=[Step(reply=Reply(text="a dot"))]))


async def test_chat_takes_a_tool_image_in_the_user_message_after_the_results(
    simulator: SimulatorServer, openai_client: openai.AsyncOpenAI
) -> None:
    _answer(simulator, "chat-img")
    completion = await openai_client.chat.completions.create(
        model="chat-img",
        messages=[
            {"role": "user", "content": "draw"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "[1 image attached]"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}]},
        ],
    )
    assert completion.choices[0].message.content == "a dot"
    [record] = simulator.state.requests(scenario="chat-img")
    assert record.body["messages"][-1]["content"][0]["image_url"]["url"] == DATA_URL


async def test_chat_refuses_an_image_in_a_tool_message_as_the_real_api_does(
    simulator: SimulatorServer, openai_client: openai.AsyncOpenAI
) -> None:
    image: Any = {"type": "image_url", "image_url": {"url": DATA_URL}}
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.chat.completions.create(
            model="chat-refused",
            messages=[
                {"role": "user", "content": "draw"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_1", "content": [image]},
            ],
        )
    assert "Image URLs are only allowed for messages with role 'user'" in str(caught.value)


async def test_responses_takes_an_input_image_in_a_function_call_output(
    simulator: SimulatorServer, openai_client: openai.AsyncOpenAI
) -> None:
    _answer(simulator, "resp-img")
    response = await openai_client.responses.create(
        model="resp-img",
        input=[
            {"type": "message", "role": "user", "content": "draw"},
            {"type": "function_call", "call_id": "call_1", "name": "chart", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": [
                    {"type": "input_text", "text": "the chart"},
                    {"type": "input_image", "image_url": DATA_URL, "detail": "auto"},
                ],
            },
        ],
    )
    assert response.output_text == "a dot"
    [record] = simulator.state.requests(scenario="resp-img")
    assert record.body["input"][-1]["output"][1]["image_url"] == DATA_URL


async def test_responses_refuses_an_output_item_of_another_type(
    simulator: SimulatorServer, openai_client: openai.AsyncOpenAI
) -> None:
    bad: Any = [{"type": "image_url", "image_url": {"url": DATA_URL}}]
    with pytest.raises(openai.BadRequestError) as caught:
        await openai_client.responses.create(
            model="resp-refused",
            input=[
                {"type": "function_call", "call_id": "c", "name": "chart", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": bad},
            ],
        )
    assert "'input_text', 'input_image', and 'input_file'" in str(caught.value)


async def test_anthropic_takes_an_image_block_in_a_tool_result(
    simulator: SimulatorServer, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    _answer(simulator, "claude-img")
    source: Any = {"type": "base64", "media_type": "image/png", "data": PNG_B64}
    message = await anthropic_client.messages.create(
        model="claude-img",
        max_tokens=100,
        messages=[
            {"role": "user", "content": "draw"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "chart", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "image", "source": source}],
                    }
                ],
            },
        ],
    )
    assert message.content[0].type == "text"
    [record] = simulator.state.requests(scenario="claude-img")
    result = record.body["messages"][-1]["content"][0]
    assert base64.b64decode(result["content"][0]["source"]["data"]).startswith(b"\x89PNG")


async def test_anthropic_refuses_an_image_of_a_type_it_does_not_read(
    simulator: SimulatorServer, anthropic_client: anthropic.AsyncAnthropic
) -> None:
    source: Any = {"type": "base64", "media_type": "image/svg+xml", "data": PNG_B64}
    with pytest.raises(anthropic.BadRequestError) as caught:
        await anthropic_client.messages.create(
            model="claude-refused",
            max_tokens=100,
            messages=[{"role": "user", "content": [{"type": "image", "source": source}]}],
        )
    assert "media_type" in str(caught.value)
