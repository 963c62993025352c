"""An answer the upstream's content filter stopped is told as OpenAI tells it: chat's
``finish_reason: "content_filter"`` (a 200 with what was said, never a 502 nor a ``length``
that would send a client to raise its token limit), Responses' ``incomplete`` for
``content_filter``; the run itself is ``failed``, not a clean success."""

from __future__ import annotations

import openai
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


def _filtered(simulator: SimulatorServer, text: str) -> None:
    reply = Reply(text=text, finish_reason="content_filter")
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=reply)]))


async def test_a_filtered_answer_ends_with_content_filter_and_what_was_said(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _filtered(simulator, "Here is how to")
    completion = await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("content_filter", "Here is how to")
    hermes = (completion.model_extra or {})["hermes"]
    assert hermes["exit_reason"] == "failed"
    assert "content filter" in hermes["error"]


async def test_an_answer_filtered_before_any_text_is_a_content_filter_not_a_502(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _filtered(simulator, "")
    completion = await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    choice = completion.choices[0]
    assert (choice.finish_reason, choice.message.content) == ("content_filter", "")


async def test_a_streamed_filtered_answer_ends_on_content_filter_not_an_error(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _filtered(simulator, "Here is how to")
    stream = await client.chat.completions.create(model="hermes-agent", messages=HELLO, stream=True)
    chunks = [chunk async for chunk in stream]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (finishes[-1], text) == ("content_filter", "Here is how to")


async def test_a_filtered_response_is_incomplete_for_content_filter(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _filtered(simulator, "Here is how to")
    response = await client.responses.create(model="hermes-agent", input="hello")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "content_filter"
    assert response.output_text == "Here is how to"
