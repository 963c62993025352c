"""A conversation started by the Conversations API (with items, before any turn) and then
continued by a chat turn naming it (``X-Hermes-Session-Id: conv_…``, as any named session):
that turn binds it to its profile's system prompt, as a Responses turn of the conversation
does, instead of running with none."""

from __future__ import annotations

import httpx
import openai

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


async def test_a_chat_turn_of_a_conversation_begun_with_items_has_the_system_prompt(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text=t)) for t in ("Ann.", "Yes.")])
    )
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ann."}]
    )
    history = [{"role": "user", "content": "My name is Ann."}]
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        answered = await http.post(
            "/v1/chat/completions",
            json={
                "model": "hermes-agent",
                "messages": [*history, {"role": "user", "content": "What is my name?"}],
            },
            headers={
                "authorization": f"Bearer {KEY_ALICE}",
                "x-hermes-session-id": conversation.id,
            },
        )
    assert answered.status_code == 200, answered.text
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert sent[0]["role"] == "system"
    assert "Hermes" in sent[0]["content"]
    # The conversation's next Responses turn goes on with the same prompt.
    await client.responses.create(model="hermes-agent", input="Sure?", conversation=conversation.id)
    again = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert again[0] == sent[0]
