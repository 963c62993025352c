"""The turn after Open WebUI's Stop during a real shell command, against a real server process:
the model is shown the stopped command and its cancellation, and the command does not run
again. (Open WebUI's Stop closes the connection; its next history leaves the stopped turn out.)"""

from __future__ import annotations

import uuid

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.server.tools.conftest import (
    MODEL,
    UPSTREAM,
    ToolServer,
    answer,
    call,
    processes_running,
    script,
    until,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


async def test_the_turn_after_a_stopped_shell_command_is_shown_its_cancellation(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    seconds = f"30.{uuid.uuid4().int % 10**6:06d}"  # a command line no other test has
    chat = f"stopped-{uuid.uuid4().hex}"
    script(simulator, call("shell", command=f"sleep {seconds}"), answer("Hello."))
    first = {"role": "user", "content": "Run the long job."}
    body = {"model": MODEL, "stream": True, "messages": [first]}
    headers = {"x-openwebui-chat-id": chat}

    async with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as sent:
        run_id = sent.headers["x-hermes-run-id"]
        assert await until(lambda: bool(processes_running(seconds)), server=tool_server)

    async def interrupted() -> bool:
        status: str = (await http.get(f"/v1/runs/{run_id}")).json()["status"]
        return status == "interrupted"

    assert await until(interrupted, server=tool_server)
    second = {"role": "user", "content": "Never mind, say hello."}
    reply = await http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [first, second]},
        headers=headers,
    )

    assert reply.json()["choices"][0]["message"]["content"] == "Hello."
    requests = simulator.state.requests(scenario=UPSTREAM)
    assert len(requests) == 2  # the command was not asked for again
    sent_messages = [m for m in requests[-1].body["messages"] if m["role"] != "system"]
    assert [m["role"] for m in sent_messages] == ["user", "assistant", "tool", "user"]
    assert sent_messages[1]["tool_calls"][0]["function"]["name"] == "shell"
    assert sent_messages[2]["content"].startswith("Cancelled:")
    assert [m["content"] for m in (sent_messages[0], sent_messages[3])] == [
        first["content"],
        second["content"],
    ]
    assert not processes_running(seconds)
