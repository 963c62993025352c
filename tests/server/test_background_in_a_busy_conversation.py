"""A background response whose conversation (or chain) is busy with a turn still running,
against a real ``serve`` process through the official SDK: the create answers at once,
``queued`` (not after ``server.session_wait_seconds``, nor with a 409 ``session_busy``); the
response joins its conversation when the turn ahead ends and runs; it can be retrieved,
streamed again and cancelled meanwhile, and a cancelled one leaves nothing in the
conversation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.responses import Response

from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.server.served import (
    Served,
    answer,
    http_client,
    script,
    sdk_client,
    serving,
    simulated_provider,
    until,
)

pytestmark = pytest.mark.slow

KEY = "sk-queued-0123456789abcdef"
MODEL = "queued-upstream"
AT_ONCE_SECONDS = 10.0
"""A create that answers within this answered at once: a create that waits for the turn
ahead waits for ``session_wait_seconds`` (the default, 30 s) before its 409."""
AHEAD_SECONDS = 6.0
"""How long the turn ahead runs when it should end by itself: a queued create answers, and is
looked at, within it (a few loopback round trips)."""


def slow(seconds: float) -> Step:
    """An answer streamed over about ``seconds`` (30 chunks): the turn ahead, still running."""
    return Step(
        reply=Reply(text="ahead " * 30, chunk_count=30), fault=Fault(chunk_delay=seconds / 30)
    )


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("queued")
    config = f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}]
providers:
{simulated_provider(_simulator_server, MODEL)}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    with serving(data, config) as server:
        yield server


@pytest.fixture
async def client(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY) as sdk:
        yield sdk


async def called(simulator: SimulatorServer, served: Served, times: int) -> bool:
    """Until the upstream has been called ``times`` times."""
    return await until(
        lambda: len(simulator.state.requests(scenario=MODEL)) >= times, server=served
    )


async def ended(client: AsyncOpenAI, served: Served, response_id: str) -> str:
    """The response's status once it is no longer queued or in progress."""
    status = ""

    async def done() -> bool:
        nonlocal status
        status = (await client.responses.retrieve(response_id)).status or ""
        return status not in ("queued", "in_progress")

    assert await until(done, server=served, seconds=60)
    return status


async def said(client: AsyncOpenAI, conversation: str) -> list[tuple[str, str]]:
    """The conversation's messages, oldest first: (role, text)."""
    items = await client.conversations.items.list(conversation, order="asc")
    messages: list[tuple[str, str]] = []
    for item in items.data:
        if item.type == "message":
            text = "".join(getattr(part, "text", "") for part in item.content)
            messages.append((item.role, text))
    return messages


async def queued_behind(
    client: AsyncOpenAI, simulator: SimulatorServer, served: Served, conversation: str, said: str
) -> tuple[Response, Response]:
    """A background turn ("first") running in ``conversation``, and one saying ``said``
    created behind it, which must answer at once (within :data:`AT_ONCE_SECONDS`)."""
    ahead = await client.responses.create(
        model="hermes-agent", input="first", conversation=conversation, background=True
    )
    assert await called(simulator, served, 1)
    queued = await asyncio.wait_for(
        client.responses.create(
            model="hermes-agent", input=said, conversation=conversation, background=True
        ),
        AT_ONCE_SECONDS,
    )
    return ahead, queued


async def test_a_background_response_in_a_busy_conversation_is_queued_at_once_and_runs_after(
    client: AsyncOpenAI, simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow(AHEAD_SECONDS), answer("Second."))
    conversation = (await client.conversations.create()).id
    ahead, queued = await queued_behind(client, simulator, served, conversation, "second")

    assert queued.status == "queued"
    # The turn ahead still runs: the queued one has not called the model, and says so.
    assert (await client.responses.retrieve(ahead.id)).status == "in_progress"
    assert (await client.responses.retrieve(queued.id)).status == "queued"
    assert len(simulator.state.requests(scenario=MODEL)) == 1
    # Its run is recorded queued too: a filter by status (read from the database, as another
    # replica reads it) finds it there, not among the running.
    async with http_client(served.base_url, KEY) as http:
        listed = {
            status: [
                run["completion_id"]
                for run in (await http.get("/v1/runs", params={"status": status})).json()["data"]
            ]
            for status in ("queued", "running")
        }
    assert queued.id in listed["queued"]
    assert queued.id not in listed["running"]
    assert await ended(client, served, queued.id) == "completed"
    assert (await client.responses.retrieve(ahead.id)).status == "completed"
    assert (await client.responses.retrieve(queued.id)).output_text == "Second."
    # It joined the conversation after the turn ahead: it saw that turn's answer.
    roles = [m["role"] for m in simulator.state.requests(scenario=MODEL)[-1].body["messages"]]
    assert roles[-3:] == ["user", "assistant", "user"]
    assert await said(client, conversation) == [
        ("user", "first"),
        ("assistant", "ahead " * 30),
        ("user", "second"),
        ("assistant", "Second."),
    ]


async def test_a_queued_background_response_streams_again_from_queued_to_completed(
    client: AsyncOpenAI, simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow(AHEAD_SECONDS), answer("Streamed."))
    conversation = (await client.conversations.create()).id
    ahead, queued = await queued_behind(client, simulator, served, conversation, "second")
    assert (await client.responses.retrieve(ahead.id)).status == "in_progress"

    events: list[Any] = []
    stream = await client.responses.retrieve(queued.id, stream=True)
    async for event in stream:
        events.append(event)
        if len(events) == 2:
            # Reattached while it waits for the turn ahead: still only the opening.
            assert len(simulator.state.requests(scenario=MODEL)) == 1

    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert events[-1].response.output_text == "Streamed."


async def test_cancelling_a_queued_background_response_leaves_its_conversation_untouched(
    client: AsyncOpenAI, simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow(60), answer("Third."))
    conversation = (await client.conversations.create()).id
    ahead, queued = await queued_behind(client, simulator, served, conversation, "never")

    cancelled = await asyncio.wait_for(client.responses.cancel(queued.id), AT_ONCE_SECONDS)

    assert cancelled.status == "cancelled"
    assert (await client.responses.retrieve(queued.id)).status == "cancelled"
    await client.responses.cancel(ahead.id)
    assert await ended(client, served, ahead.id) == "cancelled"
    # The conversation goes on after the turn ahead, without the cancelled one's message.
    third = await client.responses.create(
        model="hermes-agent", input="third", conversation=conversation
    )
    assert third.output_text == "Third."
    assert [text for role, text in await said(client, conversation) if role == "user"] == [
        "first",
        "third",
    ]
    assert len(simulator.state.requests(scenario=MODEL)) == 2


async def test_a_background_response_forking_a_busy_chain_is_queued_at_once(
    client: AsyncOpenAI, simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, answer("Root."), slow(AHEAD_SECONDS), answer("Fork."))
    root = await client.responses.create(model="hermes-agent", input="root")
    ahead = await client.responses.create(
        model="hermes-agent", input="on", previous_response_id=root.id, background=True
    )
    assert await called(simulator, served, 2)

    fork = await asyncio.wait_for(
        client.responses.create(
            model="hermes-agent", input="instead", previous_response_id=root.id, background=True
        ),
        AT_ONCE_SECONDS,
    )

    assert fork.status == "queued"
    assert (await client.responses.retrieve(ahead.id)).status == "in_progress"
    assert await ended(client, served, fork.id) == "completed"
    assert await ended(client, served, ahead.id) == "completed"
    assert (await client.responses.retrieve(fork.id)).output_text == "Fork."
    sent = simulator.state.requests(scenario=MODEL)[-1].body["messages"]
    assert [(m["role"], m["content"]) for m in sent if m["role"] != "system"] == [
        ("user", "root"),
        ("assistant", "Root."),
        ("user", "instead"),
    ]
