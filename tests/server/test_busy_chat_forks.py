"""A chat turn of a named session while another turn of it runs, under a ``steer`` or
``interrupt`` busy policy: one whose history forks the session (an edited message) or goes on
with another branch than the running one is a branch of its own, so it neither steers its
message into the running turn nor stops it (it waits, then runs as its fork); one whose
history is the running turn's, plus its next message, still steers as configured."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import openai
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL

SLOW_SECONDS = 2.0
"""How long the running turn's answer streams: the next request is one loopback round trip
(milliseconds), so that turn is still running when it comes, with a wide margin."""
SLOW_TEXT = "word " * 30


def _slow() -> Step:
    return Step(
        reply=Reply(text=SLOW_TEXT, chunk_count=30), fault=Fault(chunk_delay=SLOW_SECONDS / 30)
    )


def _script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def _text(text: str) -> Step:
    return Step(reply=Reply(text=text))


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def _users(simulator: SimulatorServer, call: int) -> list[str]:
    """The user messages of the upstream's ``call``-th request (0-based)."""
    messages = simulator.state.requests(scenario=UPSTREAM_MODEL)[call].body["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "user"]


async def _calls(simulator: SimulatorServer, count: int) -> None:
    """Until the upstream has been called ``count`` times."""
    deadline = asyncio.get_running_loop().time() + 10
    while len(simulator.state.requests(scenario=UPSTREAM_MODEL)) < count:
        assert asyncio.get_running_loop().time() < deadline, "the upstream was never called"
        await asyncio.sleep(0.02)


class _Chat:
    """Turns of one named session through the SDK."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.client = client
        self.session = f"fork-{uuid.uuid4().hex[:8]}"

    async def turn(self, *history: Any, busy: str | None = None) -> Any:
        """The raw response of a turn whose visible history is ``history``."""
        headers = {"x-hermes-session-id": self.session}
        if busy is not None:
            headers["x-hermes-session-busy"] = busy
        return await self.client.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=list(history), extra_headers=headers
        )


@pytest.mark.parametrize("mode", ["steer", "interrupt"])
async def test_a_chat_turn_that_edits_an_earlier_message_leaves_the_running_turn_alone(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, mode: str
) -> None:
    _script(simulator, _text("one"), _slow(), _text("edited"))
    chat = _Chat(client)
    await chat.turn(_user("q1"))
    running = asyncio.create_task(chat.turn(_user("q1"), _assistant("one"), _user("q2")))
    await _calls(simulator, 2)

    edited = await chat.turn(_user("q1"), _assistant("one"), _user("q2, edited"), busy=mode)
    finished = (await running).parse()

    assert "x-hermes-steered-into" not in edited.headers
    assert edited.parse().choices[0].message.content == "edited"
    assert finished.choices[0].message.content.strip() == SLOW_TEXT.strip()
    assert finished.choices[0].finish_reason == "stop"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 3
    assert _users(simulator, 1) == ["q1", "q2"]
    assert _users(simulator, 2) == ["q1", "q2, edited"]


async def test_a_chat_turn_that_goes_on_with_another_branch_leaves_the_running_turn_alone(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, _text("one"), _text("two"), _slow(), _text("three"))
    chat = _Chat(client)
    await chat.turn(_user("q1"))
    await chat.turn(_user("q1"), _assistant("one"), _user("q2"))
    # The client edits q2 (a fork, running), then goes back to the first branch and goes on.
    running = asyncio.create_task(chat.turn(_user("q1"), _assistant("one"), _user("q2, edited")))
    await _calls(simulator, 3)

    back = await chat.turn(
        _user("q1"), _assistant("one"), _user("q2"), _assistant("two"), _user("q3"), busy="steer"
    )
    finished = (await running).parse()

    assert "x-hermes-steered-into" not in back.headers
    assert back.parse().choices[0].message.content == "three"
    assert finished.choices[0].message.content.strip() == SLOW_TEXT.strip()
    assert _users(simulator, 2) == ["q1", "q2, edited"]
    assert _users(simulator, 3) == ["q1", "q2", "q3"]


async def test_a_chat_turn_that_goes_on_with_the_running_turns_history_steers_into_it(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _script(simulator, _text("one"), _slow(), _text("Words, and q3."))
    chat = _Chat(client)
    await chat.turn(_user("q1"))
    running = asyncio.create_task(chat.turn(_user("q1"), _assistant("one"), _user("q2")))
    await _calls(simulator, 2)

    # Sent while q2 is answered: the client has no answer to it yet.
    steered = await chat.turn(
        _user("q1"), _assistant("one"), _user("q2"), _user("q3"), busy="steer"
    )
    done = await running

    assert steered.headers["x-hermes-steered-into"] == done.headers["x-hermes-run-id"]
    assert done.parse().choices[0].message.content.endswith("Words, and q3.")
    assert _users(simulator, 2)[-1] == "q3"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 3  # no turn of its own
