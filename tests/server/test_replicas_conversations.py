"""A conversation lives in the store, not in a replica: made on one replica, continued on
another, listed and deleted on a third, as real ``serve`` processes on one PostgreSQL."""

from __future__ import annotations

import openai
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.served import sdk_client
from tests.server.test_replicas import (  # noqa: F401 (fixtures)
    UPSTREAM,
    Key,
    Replica,
    deployed,
    deployment,
    key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def test_a_conversation_made_on_one_replica_is_continued_listed_and_deleted_on_others(
    deployed: dict[str, Replica],  # noqa: F811 (the fixture)
    key: Key,  # noqa: F811 (the fixture)
    simulator: SimulatorServer,
) -> None:
    a, b, c = deployed["A"], deployed["B"], deployed["C"]
    secret = key.auth["authorization"].removeprefix("Bearer ")
    simulator.state.script(
        UPSTREAM,
        Scenario(steps=[Step(reply=Reply(text="Hello, Ann.")), Step(reply=Reply(text="Ann."))]),
    )
    async with (
        sdk_client(a.base_url, secret) as on_a,
        sdk_client(b.base_url, secret) as on_b,
        sdk_client(c.base_url, secret) as on_c,
    ):
        conversation = await on_a.conversations.create(metadata={"made_on": "A"})
        await on_b.responses.create(
            model="hermes-agent", input="My name is Ann.", conversation=conversation.id
        )
        second = await on_c.responses.create(
            model="hermes-agent", input="What is my name?", conversation=conversation.id
        )

        assert second.output_text == "Ann."
        last_call = simulator.state.requests(scenario=UPSTREAM)[-1].body["messages"]
        assert [m["content"] for m in last_call if m["role"] != "system"] == [
            "My name is Ann.",
            "Hello, Ann.",
            "What is my name?",
        ]
        items = [i async for i in on_a.conversations.items.list(conversation.id, order="asc")]
        assert [item.type for item in items] == ["message"] * 4
        assert (await on_b.conversations.retrieve(conversation.id)).metadata == {"made_on": "A"}

        assert (await on_c.conversations.delete(conversation.id)).deleted
        with pytest.raises(openai.NotFoundError):
            await on_a.conversations.retrieve(conversation.id)
