"""Chat's ``name`` tells participants of the same role apart (group chats, multi-agent
frameworks): it reaches a Chat Completions upstream on the new message and the history
alike, and a name OpenAI would refuse is refused here the same way, not by the upstream."""

from __future__ import annotations

import openai
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL


async def test_names_reach_the_upstream_on_the_history_and_the_new_message(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Noted."))]))
    await client.chat.completions.create(
        model="hermes-agent",
        messages=[
            {"role": "user", "name": "ada", "content": "I take the north tower."},
            {"role": "assistant", "name": "keeper", "content": "Ada has the north tower."},
            {"role": "user", "name": "grace", "content": "Then I take the south one."},
        ],
    )
    sent = simulator.state.requests()[-1].body["messages"]
    named = [(m["role"], m.get("name"), m["content"]) for m in sent if m["role"] != "system"]
    assert named[-3:] == [
        ("user", "ada", "I take the north tower."),
        ("assistant", "keeper", "Ada has the north tower."),
        ("user", "grace", "Then I take the south one."),
    ]


async def test_a_name_in_any_script_reaches_the_upstream(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Hola."))]))
    await client.chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "name": "José", "content": "hola"}]
    )

    sent = simulator.state.requests()[-1].body["messages"]
    assert [m.get("name") for m in sent if m["role"] == "user"] == ["José"]


@pytest.mark.parametrize("name", ["Ada Lovelace", "<|im_start|>", "a/b", ""])
async def test_a_name_openai_would_refuse_is_a_400_naming_it(
    client: openai.AsyncOpenAI, name: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "user", "name": name, "content": "hello"}],
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert "name" in (error.get("param") or "")
