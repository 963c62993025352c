"""``item_reference`` input items (the AI SDK sends them on every second turn): an item of an
earlier stored response, named by id, stands for that item; anything else is a 400 naming it."""

from __future__ import annotations

import httpx
import openai

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL


async def test_an_item_reference_stands_for_the_item_it_names(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(steps=[Step(reply=Reply(text="Paris.")), Step(reply=Reply(text="2.1 million."))]),
    )
    first = await client.responses.create(model="hermes-agent", input="Capital of France?")
    (answer,) = [item for item in first.output if item.type == "message"]

    second = await client.responses.create(
        model="hermes-agent",
        input=[
            {"role": "user", "content": "Capital of France?"},
            {"type": "item_reference", "id": answer.id},
            {"role": "user", "content": "How many people live there?"},
        ],
    )

    assert second.output_text == "2.1 million."
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "How many people live there?"),
    ]


async def test_a_reference_to_an_unknown_or_another_keys_item_is_a_400_naming_it(
    client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    mine = await client.responses.create(model="hermes-agent", input="hello")
    item_id = mine.output[-1].id
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        for key, reference in ((KEY_ALICE, "msg_nothing_0"), (KEY_BOB, item_id)):
            response = await http.post(
                "/v1/responses",
                headers={"authorization": f"Bearer {key}"},
                json={
                    "model": "hermes-agent",
                    "input": [{"type": "item_reference", "id": reference}],
                },
            )
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["param"] == "input"
            assert reference in error["message"]
