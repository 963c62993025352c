"""``/v1/conversations`` and ``conversation`` on ``/v1/responses``, as the official SDK (strict)
uses them against a real server: a conversation's turns see the ones before, its items are its
session's transcript, and it is its key's alone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from server.http.threaded import ThreadedServer
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_BOB, UPSTREAM_MODEL


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def said(simulator: SimulatorServer) -> list[list[dict[str, Any]]]:
    """The messages of each model call, as the upstream received them."""
    return [record.body["messages"] for record in simulator.state.requests(scenario=UPSTREAM_MODEL)]


def texts(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) of each non-system message."""
    shown = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        if message["role"] != "system":
            shown.append((message["role"], content or ""))
    return shown


def item_texts(items: list[Any]) -> list[tuple[str, str]]:
    return [
        (item.role, "".join(getattr(part, "text", "") for part in item.content))
        for item in items
        if item.type == "message"
    ]


def id_of(item: Any) -> str:
    """An item's id (some item types' ids are optional in the SDK; every one of ours has one)."""
    assert isinstance(item.id, str)
    return item.id


@pytest.fixture
async def bob(hermes: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key=KEY_BOB,
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


async def test_a_second_turn_of_a_conversation_sees_the_first_and_both_are_its_items(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    script(simulator, Step(reply=Reply(text="Hello, Ann.")), Step(reply=Reply(text="Ann.")))

    first = await client.responses.create(
        model="hermes-agent", input="My name is Ann.", conversation=conversation.id
    )
    second = await client.responses.create(
        model="hermes-agent", input="What is my name?", conversation={"id": conversation.id}
    )

    assert first.conversation is not None
    assert first.conversation.id == conversation.id
    assert second.output_text == "Ann."
    assert texts(said(simulator)[1]) == [
        ("user", "My name is Ann."),
        ("assistant", "Hello, Ann."),
        ("user", "What is my name?"),
    ]
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert item_texts(items) == [
        ("user", "My name is Ann."),
        ("assistant", "Hello, Ann."),
        ("user", "What is my name?"),
        ("assistant", "Ann."),
    ]
    newest_first = [item.id async for item in client.conversations.items.list(conversation.id)]
    assert newest_first == [item.id for item in reversed(items)]


async def test_a_conversation_is_created_with_items_and_metadata_retrieved_updated_and_deleted(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "The code word is heron."},
            {"type": "message", "role": "assistant", "content": "Noted."},
        ],
        metadata={"topic": "birds"},
    )
    assert conversation.metadata == {"topic": "birds"}
    assert (await client.conversations.retrieve(conversation.id)).id == conversation.id
    updated = await client.conversations.update(conversation.id, metadata={"topic": "fish"})
    assert updated.metadata == {"topic": "fish"}
    assert (await client.conversations.retrieve(conversation.id)).metadata == {"topic": "fish"}

    script(simulator, Step(reply=Reply(text="heron")))
    await client.responses.create(
        model="hermes-agent", input="The code word?", conversation=conversation.id
    )
    assert texts(said(simulator)[0])[:2] == [
        ("user", "The code word is heron."),
        ("assistant", "Noted."),
    ]

    deleted = await client.conversations.delete(conversation.id)
    assert deleted.deleted is True
    assert deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        await client.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(
            model="hermes-agent", input="Still there?", conversation=conversation.id
        )
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.list(conversation.id)


async def test_items_are_created_retrieved_and_deleted_and_the_model_sees_that(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    added = await client.conversations.items.create(
        conversation.id,
        items=[
            {"type": "message", "role": "user", "content": "Keep this."},
            {"type": "message", "role": "user", "content": "Forget this."},
        ],
    )
    assert item_texts(added.data) == [("user", "Keep this."), ("user", "Forget this.")]
    kept, forgotten = id_of(added.data[0]), id_of(added.data[1])

    retrieved = await client.conversations.items.retrieve(
        forgotten, conversation_id=conversation.id
    )
    assert retrieved.id == forgotten
    after = await client.conversations.items.delete(forgotten, conversation_id=conversation.id)
    assert after.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.retrieve(forgotten, conversation_id=conversation.id)
    listed = [item.id async for item in client.conversations.items.list(conversation.id)]
    assert listed == [kept]

    script(simulator, Step(reply=Reply(text="ok")))
    await client.responses.create(model="hermes-agent", input="Go.", conversation=conversation.id)
    sent = json.dumps(said(simulator)[0])
    assert "Keep this." in sent
    assert "Forget this." not in sent
    ids = [item.id async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert ids[0] == kept  # the same item, the same id, as the conversation grows


async def test_a_tool_call_is_listed_and_deleted_with_its_output(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    script(
        simulator,
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "ox"})])),
        Step(reply=Reply(text="An ox is fine.")),
    )
    await client.responses.create(model="hermes-agent", input="ox?", conversation=conversation.id)

    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    call, output = items[1], items[2]
    assert call.type == "function_call"
    assert output.type == "function_call_output"
    assert call.name == "lookup"
    assert json.loads(call.arguments) == {"word": "ox"}
    assert output.call_id == call.call_id

    await client.conversations.items.delete(output.id, conversation_id=conversation.id)
    left = [item.type async for item in client.conversations.items.list(conversation.id)]
    assert left == ["message", "message"]


async def test_another_keys_conversation_is_not_found(
    client: openai.AsyncOpenAI, bob: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Alice's secret."}]
    )
    items = [item async for item in client.conversations.items.list(conversation.id)]

    with pytest.raises(openai.NotFoundError):
        await bob.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await bob.conversations.items.list(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await bob.conversations.items.retrieve(id_of(items[0]), conversation_id=conversation.id)
    with pytest.raises(openai.NotFoundError):
        await bob.conversations.update(conversation.id, metadata={"a": "b"})
    with pytest.raises(openai.NotFoundError):
        await bob.conversations.delete(conversation.id)
    with pytest.raises(openai.NotFoundError):
        await bob.responses.create(model="hermes-agent", input="hi", conversation=conversation.id)
    assert (await client.conversations.retrieve(conversation.id)).id == conversation.id


async def test_a_conversation_with_a_previous_response_id_is_a_400(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    script(simulator, Step(reply=Reply(text="one")))
    first = await client.responses.create(model="hermes-agent", input="one")

    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(
            model="hermes-agent",
            input="two",
            conversation=conversation.id,
            previous_response_id=first.id,
        )
    assert raised.value.body["param"] == "conversation"  # type: ignore[index]


async def test_a_streamed_response_in_a_conversation_is_appended_too(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    script(simulator, Step(reply=Reply(text="Streamed answer.", chunk_count=3)))

    stream = await client.responses.create(
        model="hermes-agent", input="Stream it.", conversation=conversation.id, stream=True
    )
    kinds = [event.type async for event in stream]

    assert kinds[-1] == "response.completed"
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert item_texts(items) == [("user", "Stream it."), ("assistant", "Streamed answer.")]


async def test_bad_conversation_bodies_are_400s(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        await client.conversations.create(metadata={f"k{i}": "v" for i in range(17)})
    with pytest.raises(openai.BadRequestError):
        await client.conversations.create(items=[{"type": "item_reference", "id": "msg_x"}])
    conversation = await client.conversations.create()
    with pytest.raises(openai.BadRequestError):
        await client.conversations.items.create(conversation.id, items=[])
    with pytest.raises(openai.BadRequestError):
        await client.conversations.items.create(
            conversation.id, items=[{"type": "reasoning", "id": "rs_1", "summary": []}]
        )
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.delete("msg_nope", conversation_id=conversation.id)


async def test_a_conversation_is_not_changed_under_a_response_in_progress(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    slow = Step(reply=Reply(text="slowly, slowly", chunk_count=8), fault=Fault(chunk_delay=0.25))
    script(simulator, slow)
    running = await client.responses.create(
        model="hermes-agent", input="Take your time.", conversation=conversation.id, background=True
    )

    with pytest.raises(openai.ConflictError):
        await client.conversations.delete(conversation.id)
    with pytest.raises(openai.ConflictError):
        await client.conversations.items.create(
            conversation.id, items=[{"type": "message", "role": "user", "content": "Now!"}]
        )

    deadline = time.monotonic() + 30
    while (await client.responses.retrieve(running.id)).status != "completed":
        assert time.monotonic() < deadline, "the response never completed"
        await asyncio.sleep(0.05)
    assert (await client.conversations.delete(conversation.id)).deleted


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"21 °C in {city}"


async def test_the_agents_sdk_runs_a_client_tool_in_a_conversation_and_continues_it(
    simulator: SimulatorServer, hermes: ThreadedServer, client: openai.AsyncOpenAI
) -> None:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # the SDK would upload traces to OpenAI
    conversation = await client.conversations.create()
    weather = ToolCallSpec(name="get_weather", arguments={"city": "Paris"})
    script(
        simulator,
        Step(reply=Reply(tool_calls=[weather])),
        Step(reply=Reply(text="It is 21 °C in Paris.")),
        Step(reply=Reply(text="You asked about Paris.")),
    )
    model = OpenAIResponsesModel(model="hermes-agent", openai_client=client)
    agent = Agent(name="assistant", model=model, tools=[function_tool(get_weather)])

    first = await Runner.run(agent, "Weather in Paris?", conversation_id=conversation.id)
    second = await Runner.run(agent, "Which city did I ask about?", conversation_id=conversation.id)

    assert first.final_output == "It is 21 °C in Paris."
    assert second.final_output == "You asked about Paris."
    assert texts(said(simulator)[2])[-2:] == [
        ("assistant", "It is 21 °C in Paris."),
        ("user", "Which city did I ask about?"),
    ]
    kinds = [
        item.type async for item in client.conversations.items.list(conversation.id, order="asc")
    ]
    assert kinds == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "message",
        "message",
    ]


async def test_a_memory_scope_keeps_its_own_items_and_deleting_the_conversation_deletes_them(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    conversation = await client.conversations.create()
    scoped = {"x-hermes-memory-scope": "user-7"}
    script(simulator, Step(reply=Reply(text="Hi, user 7.")))
    await client.responses.create(
        model="hermes-agent", input="Hi.", conversation=conversation.id, extra_headers=scoped
    )

    listed = client.conversations.items.list(conversation.id, extra_headers=scoped)
    assert len([item async for item in listed]) == 2
    assert [item async for item in client.conversations.items.list(conversation.id)] == []

    assert (await client.conversations.delete(conversation.id)).deleted
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.list(conversation.id, extra_headers=scoped)
