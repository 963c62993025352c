"""Deleting a conversation's item leaves its responses where they ended: a response continued
by ``previous_response_id`` afterwards sees its own transcript less the deleted item, never a
message that came after it."""

from __future__ import annotations

from typing import Any

import openai

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL


def _said(simulator: SimulatorServer) -> list[tuple[str, str]]:
    """(role, text) of the last model call's non-system messages."""
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body[
        "messages"
    ]
    return [(m["role"], str(m.get("content"))) for m in messages if m["role"] != "system"]


async def test_an_earlier_response_continued_after_an_item_was_deleted_sees_its_own_transcript(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    replies = ["one", "two", "after one"]
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text=r)) for r in replies])
    )
    conversation = await client.conversations.create(
        items=[
            {"type": "message", "role": "user", "content": "Keep this."},
            {"type": "message", "role": "assistant", "content": "Kept."},
            {"type": "message", "role": "user", "content": "Forget this."},
        ]
    )
    first = await client.responses.create(
        model="hermes-agent", input="q1", conversation=conversation.id
    )
    await client.responses.create(model="hermes-agent", input="q2", conversation=conversation.id)
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    forgotten = items[2].id
    assert isinstance(forgotten, str)

    await client.conversations.items.delete(forgotten, conversation_id=conversation.id)
    await client.responses.create(model="hermes-agent", input="q3", previous_response_id=first.id)

    # ``first`` ended with its answer: "q2" came after it, and "Forget this." is gone.
    assert _said(simulator) == [
        ("user", "Keep this."),
        ("assistant", "Kept."),
        ("user", "q1"),
        ("assistant", "one"),
        ("user", "q3"),
    ]
