"""A turn refused after it found its conversation (a file it names cannot be read, its budget
is spent, ...) keeps none of its input: the client was told it failed, and it may send the
same message again, which the model must then see once, not twice."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL


async def test_a_refused_turn_of_a_conversation_leaves_no_item_behind(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Read."))]))
    conversation = await client.conversations.create()
    unreadable: Any = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "read this"},
                {"type": "input_file", "file_id": "file-nope"},
            ],
        }
    ]
    with pytest.raises(openai.BadRequestError):
        await client.responses.create(
            model="hermes-agent", conversation=conversation.id, input=unreadable
        )
    assert [item async for item in client.conversations.items.list(conversation.id)] == []
    await client.responses.create(
        model="hermes-agent", conversation=conversation.id, input="read this"
    )
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["read this"]
