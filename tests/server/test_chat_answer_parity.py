"""A non-streamed chat completion tells what a stream of the same run shows: its reasoning
and one line per server tool step in ``message.reasoning_content`` (the documented shape)."""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageParam

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
