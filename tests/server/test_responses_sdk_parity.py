"""``/v1/responses`` as OpenAI's own clients use it, through the strict official SDK, where
our behaviour once parted from OpenAI's: listing input items, cancelling, and the other
companions of a stored response."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.simulator import Reply, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL
from tests.server.test_responses import (
    WEATHER_TOOL,
    call,
    script,
    text,
    tools,
    upstream_messages,
)


async def test_input_items_of_a_replayed_conversation_validate_and_page_in_order(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # A stateless client sends its whole conversation back, function calls included, each
    # item as it built it (without a status, an image without its detail, an answer without
    # annotations): a strict SDK still reads the list.
    script(simulator, text("It is sunny in Paris."))
    sent: list[Any] = [
        {"role": "user", "content": [
            {"type": "input_text", "text": "weather in Paris?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
        ]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        {"role": "user", "content": "and so?"},
    ]  # fmt: skip
    created = await client.responses.create(model="hermes-agent", input=sent, tools=[WEATHER_TOOL])

    newest_first = await client.responses.input_items.list(created.id)
    oldest_first = await client.responses.input_items.list(created.id, order="asc", limit=2)
    after = await client.responses.input_items.list(
        created.id, order="asc", after=oldest_first.data[-1].id
    )
    every = [item async for item in client.responses.input_items.list(created.id, limit=2)]

    kinds = ["message", "function_call", "function_call_output", "message", "message"]
    assert [item.type for item in newest_first.data] == kinds[::-1]
    assert {getattr(item, "status", None) for item in newest_first.data} == {"completed"}
    assert [item.type for item in oldest_first.data] == kinds[:2]
    assert oldest_first.has_more
    assert [item.type for item in after.data] == kinds[2:]
    assert not after.has_more
    assert [item.id for item in every] == [item.id for item in newest_first.data]


async def test_cancelling_a_cancelled_response_again_returns_it(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # OpenAI: "Cancelling twice is idempotent - subsequent calls simply return the final
    # Response object." A client whose first cancel's answer was lost retries it.
    script(simulator, tools(call("hold")), text("never"))
    started = await client.responses.create(model="hermes-agent", input="slow", background=True)
    first = await client.responses.cancel(started.id)
    again = await client.responses.cancel(started.id)
    assert (first.status, again.status) == ("cancelled", "cancelled")
    assert again.model_dump() == first.model_dump()


async def test_a_function_call_output_answering_no_call_of_the_previous_response_is_a_400(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # A mistyped call_id was dropped unseen, and the model told that no result was recorded
    # for the call the client did answer: OpenAI refuses it, naming the call_id.
    script(simulator, tools(call("get_weather", city="Paris")), text("It is sunny."))
    first = await client.responses.create(
        model="hermes-agent", input="weather in Paris?", tools=[WEATHER_TOOL]
    )
    (asked,) = [item for item in first.output if item.type == "function_call"]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="hermes-agent",
            previous_response_id=first.id,
            tools=[WEATHER_TOOL],
            input=[{"type": "function_call_output", "call_id": "call_typo", "output": "sunny"}],
        )
    answered = await client.responses.create(
        model="hermes-agent",
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],
        input=[{"type": "function_call_output", "call_id": asked.call_id, "output": "sunny"}],
    )
    assert refused.value.param == "input"
    assert "call_typo" in refused.value.message
    assert answered.output_text == "It is sunny."


async def test_instructions_are_not_carried_over_a_previous_response_id(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # OpenAI: the previous response's instructions are not inherited; each request's own
    # (or none) are the system layer of its turn.
    script(simulator, text("Arr."), text("Plain."), text("Brief."))
    first = await client.responses.create(
        model="hermes-agent", input="hi", instructions="Talk like a pirate."
    )
    second = await client.responses.create(
        model="hermes-agent", input="again", previous_response_id=first.id
    )
    third = await client.responses.create(
        model="hermes-agent",
        input="once more",
        previous_response_id=second.id,
        instructions="Be brief.",
    )
    systems = [messages[0]["content"] for messages in upstream_messages(simulator)]
    assert "Talk like a pirate." in systems[0]
    assert "Talk like a pirate." not in systems[1] + systems[2]
    assert "Be brief." in systems[2]
    assert (second.instructions, third.instructions) == (None, "Be brief.")


async def test_a_store_false_response_cannot_be_continued_or_retrieved(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, text("Gone."))
    unstored = await client.responses.create(model="hermes-agent", input="hi", store=False)
    with pytest.raises(openai.BadRequestError) as continued:
        await client.responses.create(
            model="hermes-agent", input="and?", previous_response_id=unstored.id
        )
    with pytest.raises(openai.NotFoundError):
        await client.responses.input_items.list(unstored.id)
    assert (continued.value.code, continued.value.param) == (
        "previous_response_not_found",
        "previous_response_id",
    )


async def test_max_output_tokens_cutting_the_answer_ends_incomplete_with_its_reason(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, Step(reply=Reply(text="The answer is cut", finish_reason="length")))
    stream = await client.responses.create(
        model="hermes-agent", input="a long answer", max_output_tokens=16, stream=True
    )
    events = [event async for event in stream]
    final = events[-1].response  # type: ignore[union-attr]
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body
    assert events[-1].type == "response.incomplete"
    assert (final.status, final.max_output_tokens) == ("incomplete", 16)
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output_text == "The answer is cut"
    assert sent["max_tokens"] == 16


@pytest.mark.parametrize(
    "tool_choice",
    [
        {"type": "function", "name": "get_wether"},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "nope"}]},
    ],
)
async def test_a_tool_choice_naming_a_function_the_tools_lack_is_a_400(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, tool_choice: Any
) -> None:
    # Forced, the upstream refused it (a 502 to the client); allowed, the model was offered
    # none of the client's tools. As on chat, and on OpenAI: the request names its mistake.
    script(simulator, text("never"))
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="hermes-agent", input="weather?", tools=[WEATHER_TOOL], tool_choice=tool_choice
        )
    assert refused.value.param == "tool_choice"
    assert simulator.state.requests(scenario=UPSTREAM_MODEL) == []
