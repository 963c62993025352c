"""A chat client's own output limit (``max_completion_tokens`` / ``max_tokens``) ending a reply
answers as OpenAI does: ``finish_reason: "length"`` with what was written, never a 502."""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


def _cut(simulator: SimulatorServer, reply: Reply) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=reply)]))


async def test_an_answer_cut_by_max_completion_tokens_ends_with_length(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _cut(simulator, Reply(text="The answer is for", finish_reason="length"))
    completion = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, max_completion_tokens=5
    )
    assert completion.choices[0].message.content == "The answer is for"
    assert completion.choices[0].finish_reason == "length"
    assert (completion.model_extra or {})["hermes"]["exit_reason"] == "truncated"
    assert simulator.state.requests()[-1].body["max_tokens"] == 5


async def test_a_limit_spent_on_reasoning_ends_with_length_not_a_502(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _cut(simulator, Reply(reasoning="Let me think this through", finish_reason="length"))
    completion = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, max_completion_tokens=5
    )
    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("length", "")
    hermes = (completion.model_extra or {})["hermes"]
    assert hermes["exit_reason"] == "truncated"
    assert "max_tokens" in hermes["error"]


async def test_a_streamed_reply_cut_before_any_text_ends_with_length(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _cut(simulator, Reply(reasoning="Let me think this through", finish_reason="length"))
    stream = await client.chat.completions.create(
        model="hermes-agent", messages=HELLO, max_tokens=5, stream=True
    )
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert finishes[-1] == "length"
