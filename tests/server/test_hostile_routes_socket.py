"""Hostile messages on the Responses WebSocket: text no store can hold (NUL, lone surrogates,
spelt as JSON escapes) is refused as HTTP refuses it, and a binary message gets an error event;
each is a 400 error event, and the socket goes on serving the next turn."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL

CREATE = '{"type": "response.create", "model": "hermes-agent", '
ENDINGS = ("error", "response.completed", "response.failed", "response.incomplete")


async def _until_done(socket: ClientConnection) -> dict[str, Any]:
    """The event that ends the turn (or the error event refusing it)."""
    while True:
        event: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), 30))
        if event["type"] in ENDINGS:
            return event


@pytest.mark.parametrize(
    "message",
    [
        CREATE + '"input": "a lone surrogate \\ud800"}',
        CREATE + '"input": "a NUL \\u0000"}',
        CREATE + '"input": "x", "metadata": {"\\udcff": "v"}}',
        CREATE + '"input": "x", "instructions": "\\u0000"}',
        b"\x00\x01 a binary message",
    ],
    ids=["surrogate", "nul", "surrogate-metadata-key", "nul-instructions", "binary"],
)
async def test_a_hostile_message_gets_a_400_error_event_and_the_socket_stays_open(
    hermes: ThreadedServer, simulator: SimulatorServer, message: str | bytes
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="fine"))]))
    url = hermes.base_url.replace("http://", "ws://") + "/v1/responses"
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    async with connect(url, additional_headers=headers) as socket:
        await socket.send(message)
        refused = await _until_done(socket)
        await socket.send(CREATE + '"input": "hello"}')
        after = await _until_done(socket)

    assert (refused["type"], refused["status"]) == ("error", 400), refused
    assert refused["error"]["code"] == "invalid_request"
    assert after["type"] == "response.completed"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 1  # the refused one ran not
