"""/v1/responses over a WebSocket, as the official SDK's ``responses.connect()`` uses it: the
events of a streamed response per ``response.create``, turns one after another on one
connection, bad events answered with an error event, and the key checked at the handshake."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import openai
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server.http.threaded import ThreadedServer
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


async def _events_until_done(connection: Any) -> list[Any]:
    events = []
    async for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.failed", "response.incomplete", "error"):
            return events
    return events


async def test_two_turns_on_one_socket_stream_like_http_and_chain(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(steps=[Step(reply=Reply(text="Paris.")), Step(reply=Reply(text="Lyon too."))]),
    )
    async with client.responses.connect() as connection:
        await connection.response.create(model="hermes-agent", input="Capital of France?")
        first = await _events_until_done(connection)
        done = first[-1]
        assert done.type == "response.completed"
        assert [e.type for e in first[:2]] == ["response.created", "response.in_progress"]
        deltas = "".join(e.delta for e in first if e.type == "response.output_text.delta")
        assert deltas == "Paris."

        await connection.response.create(
            model="hermes-agent", input="And another city?", previous_response_id=done.response.id
        )
        second = await _events_until_done(connection)

    assert second[-1].type == "response.completed"
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert any(m["role"] == "assistant" and m["content"] == "Paris." for m in sent)


async def test_a_bad_event_gets_an_error_event_and_the_socket_stays_open(
    client: openai.AsyncOpenAI,
) -> None:
    async with client.responses.connect() as connection:
        await connection.send({"type": "response.create", "model": "no-such-model"})
        (error,) = await _events_until_done(connection)
        await connection.response.create(model="hermes-agent", input="hello")
        after = await _events_until_done(connection)

    assert error.type == "error"
    assert after[-1].type == "response.completed"


async def test_an_unknown_previous_response_is_a_400_error_event_as_over_http(
    client: openai.AsyncOpenAI,
) -> None:
    async with client.responses.connect() as connection:
        await connection.response.create(
            model="hermes-agent", input="and?", previous_response_id="resp_nope"
        )
        (error,) = await _events_until_done(connection)

    assert error.type == "error"
    assert error.status == 400
    assert (error.error.type, error.error.code, error.error.param) == (
        "invalid_request_error",
        "previous_response_not_found",
        "previous_response_id",
    )


async def test_http_only_fields_are_refused_with_an_error_event_carrying_a_code(
    hermes: ThreadedServer,
) -> None:
    url = hermes.base_url.replace("http://", "ws://") + "/v1/responses"
    event = {"type": "response.create", "model": "hermes-agent", "input": "x", "stream": True}
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    async with connect(url, additional_headers=headers) as socket:
        await socket.send(json.dumps(event))
        error = json.loads(await asyncio.wait_for(socket.recv(), 30))

    assert error["type"] == "error"
    assert error["status"] == 400
    assert error["error"]["code"] == "invalid_request"
    assert error["error"]["param"] == "stream"


async def test_a_socket_without_a_valid_key_is_refused(hermes: ThreadedServer) -> None:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key="sk-wrong",
        max_retries=0,
    ) as wrong:
        connecting = wrong.responses.connect(max_retries=0)
        with pytest.raises(InvalidStatus) as refused:
            await connecting.__aenter__()

    assert refused.value.response.status_code == 401


async def test_closing_the_socket_stops_the_run_in_progress(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    slow = Step(reply=Reply(text="word " * 40, chunk_count=40), fault=Fault(chunk_delay=0.2))
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[slow]))
    async with client.responses.connect() as connection:
        await connection.response.create(model="hermes-agent", input="talk slowly")
        async for event in connection:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                break  # and leave mid-answer

    deadline = time.monotonic() + 30
    status = "in_progress"
    while status == "in_progress" and time.monotonic() < deadline:
        status = (await client.responses.retrieve(response_id)).status or ""
        await asyncio.sleep(0.1)
    assert status == "cancelled"


async def test_a_connection_is_closed_when_its_time_is_up(
    hermes: ThreadedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("server.routes.responses_socket.CONNECTION_SECONDS", 0.5)
    url = hermes.base_url.replace("http://", "ws://") + "/v1/responses"
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    async with connect(url, additional_headers=headers) as socket:
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(socket.recv(), 30)

    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1001


async def test_a_store_false_response_is_continued_on_the_same_socket(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(steps=[Step(reply=Reply(text="Hello Ada.")), Step(reply=Reply(text="Ada."))]),
    )
    async with client.responses.connect() as connection:
        await connection.response.create(model="hermes-agent", input="I am Ada.", store=False)
        first = (await _events_until_done(connection))[-1]
        await connection.response.create(
            model="hermes-agent",
            input="What is my name?",
            store=False,
            previous_response_id=first.response.id,
        )
        second = await _events_until_done(connection)

    assert second[-1].type == "response.completed"
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "I am Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]
    # Nothing of it was stored: over HTTP, the first response is unknown.
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(first.response.id)
