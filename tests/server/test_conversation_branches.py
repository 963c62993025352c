"""A response that continues a conversation's response by ``previous_response_id`` alone (the
request names no ``conversation``) is a chain of its own, as on OpenAI: it sees the
conversation up to that response, and the conversation neither shows it nor continues it."""

from __future__ import annotations

import asyncio
from typing import Any

import openai

from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.server.conftest import UPSTREAM_MODEL


def _said(simulator: SimulatorServer) -> list[tuple[str, str]]:
    """(role, text) of the last model call's non-system messages."""
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body[
        "messages"
    ]
    return [(m["role"], str(m.get("content"))) for m in messages if m["role"] != "system"]


async def test_a_branch_off_a_conversations_response_leaves_the_conversation_as_it_was(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    replies = ["one", "two", "branch", "aside", "three", "branch again"]
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text=r)) for r in replies])
    )
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model="hermes-agent", input="q1", conversation=conversation.id
    )
    second = await client.responses.create(
        model="hermes-agent", input="q2", conversation=conversation.id
    )

    branch = await client.responses.create(
        model="hermes-agent", input="q-branch", previous_response_id=first.id
    )
    assert _said(simulator) == [("user", "q1"), ("assistant", "one"), ("user", "q-branch")]
    assert branch.conversation is None
    # From the conversation's newest response too, a response naming no conversation is not
    # the conversation's.
    await client.responses.create(
        model="hermes-agent", input="q-aside", previous_response_id=second.id
    )
    assert _said(simulator)[-2:] == [("assistant", "two"), ("user", "q-aside")]

    await client.responses.create(model="hermes-agent", input="q3", conversation=conversation.id)
    assert _said(simulator) == [
        ("user", "q1"),
        ("assistant", "one"),
        ("user", "q2"),
        ("assistant", "two"),
        ("user", "q3"),
    ]
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    shown = [
        "".join(getattr(part, "text", "") for part in item.content)
        for item in items
        if item.type == "message"
    ]
    assert shown == ["q1", "one", "q2", "two", "q3", "three"]

    # The branch goes on as a chain of its own.
    await client.responses.create(
        model="hermes-agent", input="q-more", previous_response_id=branch.id
    )
    assert _said(simulator) == [
        ("user", "q1"),
        ("assistant", "one"),
        ("user", "q-branch"),
        ("assistant", "branch"),
        ("user", "q-more"),
    ]


async def test_a_branch_off_a_conversation_does_not_wait_for_the_conversations_turn(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    wait = ToolCallSpec(name="wait", arguments={"seconds": 1})
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(text="one")),
                Step(reply=Reply(tool_calls=[wait])),
                Step(reply=Reply(text="branch")),
                Step(reply=Reply(text="two")),
            ]
        ),
    )
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model="hermes-agent", input="q1", conversation=conversation.id
    )
    running = asyncio.create_task(
        client.responses.create(model="hermes-agent", input="q2", conversation=conversation.id)
    )
    deadline = asyncio.get_running_loop().time() + 10
    while len(simulator.state.requests(scenario=UPSTREAM_MODEL)) < 2:
        assert asyncio.get_running_loop().time() < deadline, "the second turn never began"
        await asyncio.sleep(0.02)
    # A chain of its own: the conversation's running turn is no business of it.
    branch = await client.responses.create(
        model="hermes-agent",
        input="q-branch",
        previous_response_id=first.id,
        extra_headers={"x-hermes-session-busy": "reject"},
    )
    assert branch.output_text == "branch"
    assert (await running).output_text == "two"
