"""A Responses turn of ``store: false`` keeps nothing, even when a session header names its
conversation: it runs on that conversation as it stands (hidden tool history included) and
adds none of its messages to it, as a ``conversation`` in the body refuses ``store: false``."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


async def test_an_unstored_turn_naming_a_conversation_adds_nothing_to_it(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    lookup = ToolCallSpec(name="lookup", arguments={"word": "zebra"})
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(tool_calls=[lookup])),
                Step(reply=Reply(text="Zebras are fine.")),
                Step(reply=Reply(text="Off the record.")),
            ]
        ),
    )
    conversation = await client.conversations.create()
    await client.responses.create(
        model="hermes-agent", input="check zebra", conversation=conversation.id
    )
    history: list[Any] = [
        {"role": "user", "content": "check zebra"},
        {"role": "assistant", "content": "Zebras are fine."},
        {"role": "user", "content": "a private aside"},
    ]
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        unstored = await http.post(
            "/v1/responses",
            json={"model": "hermes-agent", "input": history, "store": False},
            headers={
                "authorization": f"Bearer {KEY_ALICE}",
                "x-hermes-session-id": conversation.id,
            },
        )
    assert unstored.status_code == 200, unstored.text
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert any(m["role"] == "tool" for m in sent)  # the conversation's hidden tool history
    assert sent[-1]["content"] == "a private aside"
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    shown = [
        "".join(getattr(part, "text", "") for part in item.content)
        for item in items
        if item.type == "message"
    ]
    assert shown == ["check zebra", "Zebras are fine."]
