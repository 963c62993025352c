"""A conversation's item deleted while a response of it is being saved (its run has ended, its
stored response is not final yet) never leaves that response ending past where it ended: a
response continued by ``previous_response_id`` afterwards sees its own transcript less the
deleted item, never a message that came after it.

The moment is made, not waited for: the response's recorder is held (``Run.until_finished``,
which it awaits before its final save, is wrapped) while the test deletes the item."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import openai
import pytest

from hermes_core.events import RunFinished
from server.runs.manager import Run
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL

GATE_SECONDS = 30.0
"""The longest either side waits for the other at the held moment (each is milliseconds)."""


class _Gap:
    """Holds the next response's recorder between its run's ending and its final save."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = threading.Event()
        self.go = threading.Event()


@pytest.fixture
def gap(monkeypatch: pytest.MonkeyPatch) -> _Gap:
    held = _Gap()
    until_finished = Run.until_finished

    async def then_held(run: Run) -> RunFinished:
        ended = await until_finished(run)
        if held.armed:  # the server's loop, its own thread: the test's loop is another
            held.armed = False
            held.reached.set()
            await asyncio.to_thread(held.go.wait, GATE_SECONDS)
        return ended

    monkeypatch.setattr(Run, "until_finished", then_held)
    return held


def _said(simulator: SimulatorServer) -> list[tuple[str, str]]:
    """(role, text) of the last model call's non-system messages."""
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body[
        "messages"
    ]
    return [(m["role"], str(m.get("content"))) for m in messages if m["role"] != "system"]


async def test_an_item_deleted_as_a_response_is_saved_is_not_in_that_response_when_continued(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, gap: _Gap
) -> None:
    replies = ["one", "two", "four", "after two"]
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
    await client.responses.create(model="hermes-agent", input="q1", conversation=conversation.id)
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    forgotten = items[2].id
    assert isinstance(forgotten, str)

    gap.armed = True
    second = asyncio.create_task(
        client.responses.create(model="hermes-agent", input="q2", conversation=conversation.id)
    )
    assert await asyncio.to_thread(gap.reached.wait, GATE_SECONDS), "the response never ended"
    try:  # its run has ended; its response is not saved yet
        await client.conversations.items.delete(forgotten, conversation_id=conversation.id)
        deleted = True
    except openai.ConflictError:  # the response is not final yet: a change waits for it
        deleted = False
    finally:
        gap.go.set()
    answered = await second
    if not deleted:
        await client.conversations.items.delete(forgotten, conversation_id=conversation.id)
    await client.responses.create(model="hermes-agent", input="q4", conversation=conversation.id)
    await client.responses.create(
        model="hermes-agent", input="q3", previous_response_id=answered.id
    )

    # ``answered`` ended with its answer: "q4" came after it, and "Forget this." is gone.
    assert _said(simulator) == [
        ("user", "Keep this."),
        ("assistant", "Kept."),
        ("user", "q1"),
        ("assistant", "one"),
        ("user", "q2"),
        ("assistant", "two"),
        ("user", "q3"),
    ]
