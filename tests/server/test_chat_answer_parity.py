"""A non-streamed chat completion tells what a stream of the same run shows: its reasoning
and one line per server tool step in ``message.reasoning_content`` (the documented shape)."""

from __future__ import annotations

from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel

from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.server.conftest import UPSTREAM_MODEL

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


def _one_lookup(simulator: SimulatorServer) -> None:
    lookup = ToolCallSpec(name="lookup", arguments={"word": "zebra"})
    steps = [
        Step(reply=Reply(reasoning="One word to check.", tool_calls=[lookup])),
        Step(reply=Reply(text="Zebra is fine.")),
    ]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))


async def test_a_non_streamed_answer_lists_its_tool_steps_in_reasoning_content(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _one_lookup(simulator)
    completion = await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    reasoning = (completion.choices[0].message.model_extra or {})["reasoning_content"]
    assert reasoning.startswith("One word to check.")
    assert "→ lookup zebra" in reasoning
    assert "✓ lookup (" in reasoning


async def test_reasoning_content_reads_the_same_streamed_or_not(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _one_lookup(simulator)
    completion = await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    _one_lookup(simulator)
    stream = await client.chat.completions.create(model="hermes-agent", messages=HELLO, stream=True)
    streamed = [
        (chunk.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        async for chunk in stream
        if chunk.choices
    ]
    plain = (completion.choices[0].message.model_extra or {})["reasoning_content"]

    def without_durations(text: str) -> str:
        return "\n".join(line.split(" (")[0] for line in text.splitlines())

    assert without_durations(plain) == without_durations("".join(streamed))


OPEN_PAGE = ToolCallSpec(name="open_page", arguments={"url": "https://example.org"})
STRICT_TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "open_page",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"url": {"type": "string"}},
                "required": ["url"],
                "additionalProperties": False,
            },
        },
    }
]


class City(BaseModel):
    city: str


async def test_parse_with_tools_gets_the_client_calls_before_the_structured_answer(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # The text beside the calls is no answer of the schema's: held back, as a stream holds it.
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(steps=[Step(reply=Reply(text="Let me look.", tool_calls=[OPEN_PAGE]))]),
    )
    completion = await client.chat.completions.parse(
        model="hermes-agent", messages=HELLO, tools=STRICT_TOOLS, response_format=City
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "tool_calls"
    assert (message.content, message.parsed) == (None, None)
    assert [call.function.name for call in message.tool_calls or ()] == ["open_page"]
