"""A response that branches off an earlier response of its chain (``previous_response_id``)
while a sibling branch's run is still running is a fork of its own: a ``steer`` or
``interrupt`` busy policy neither steers its message into the sibling's run nor stops it."""

from __future__ import annotations

import asyncio

import openai
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL

SLOW_SECONDS = 2.0
"""How long the sibling's answer streams: the branch's request is one loopback round trip
(milliseconds), so the sibling is still running when it comes, with a wide margin."""


def _users(simulator: SimulatorServer, call: int) -> list[str]:
    """The user messages of the upstream's ``call``-th request (0-based)."""
    messages = simulator.state.requests(scenario=UPSTREAM_MODEL)[call].body["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "user"]


@pytest.mark.parametrize("mode", ["steer", "interrupt"])
async def test_a_branch_off_an_earlier_response_leaves_its_siblings_run_alone(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, mode: str
) -> None:
    slow = Step(
        reply=Reply(text="word " * 30, chunk_count=30),
        fault=Fault(chunk_delay=SLOW_SECONDS / 30),
    )
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(steps=[Step(reply=Reply(text="one")), slow, Step(reply=Reply(text="branch"))]),
    )
    first = await client.responses.create(model="hermes-agent", input="q1")
    sibling = asyncio.create_task(
        client.responses.create(model="hermes-agent", input="q2", previous_response_id=first.id)
    )
    deadline = asyncio.get_running_loop().time() + 10
    while len(simulator.state.requests(scenario=UPSTREAM_MODEL)) < 2:
        assert asyncio.get_running_loop().time() < deadline, "the sibling never began"
        await asyncio.sleep(0.02)

    branch = await client.responses.with_raw_response.create(
        model="hermes-agent",
        input="q3",
        previous_response_id=first.id,
        extra_headers={"x-hermes-session-busy": mode},
    )
    finished = await sibling

    assert "x-hermes-steered-into" not in branch.headers
    assert branch.parse().output_text == "branch"
    assert finished.status == "completed"
    assert finished.output_text.strip() == ("word " * 30).strip()
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 3
    assert _users(simulator, 1) == ["q1", "q2"]
    assert _users(simulator, 2) == ["q1", "q3"]
