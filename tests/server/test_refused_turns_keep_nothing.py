"""A turn refused after it found its conversation (a file it names cannot be read, its budget
is spent, ...) keeps none of its input: the client was told it failed, and it may send the
same message again, which the model must then see once, not twice."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


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


async def test_a_refused_edit_leaves_no_branch_that_shadows_the_one_it_copied(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    lookup = ToolCallSpec(name="lookup", arguments={"word": "zebra"})
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(text="Hi.")),
                Step(reply=Reply(tool_calls=[lookup])),
                Step(reply=Reply(text="Zebras are fine.")),
                Step(reply=Reply(text="Bye.")),
            ]
        ),
    )
    history: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
    unreadable = [
        {"type": "text", "text": "read this"},
        {"type": "file", "file": {"file_id": "file-nope"}},
    ]
    async with httpx.AsyncClient(
        verify=TLS_UNUSED,
        base_url=hermes.base_url,
        headers={"authorization": f"Bearer {KEY_ALICE}", "x-hermes-session-id": "refused-edit"},
        timeout=30,
    ) as http:

        async def chat(messages: list[dict[str, Any]]) -> httpx.Response:
            body = {"model": "hermes-agent", "messages": messages}
            return await http.post("/v1/chat/completions", json=body)

        assert (await chat(history)).status_code == 200
        history += [{"role": "assistant", "content": "Hi."}]
        assert (await chat([*history, {"role": "user", "content": "zebra?"}])).status_code == 200
        # An edit of that last message, refused: its fork must not be kept.
        refused = await chat([*history, {"role": "user", "content": unreadable}])
        assert refused.status_code == 400, refused.text
        history += [
            {"role": "user", "content": "zebra?"},
            {"role": "assistant", "content": "Zebras are fine."},
            {"role": "user", "content": "bye"},
        ]
        assert (await chat(history)).status_code == 200
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    # The original branch went on, its hidden tool call included.
    assert any(m["role"] == "tool" for m in sent)
