"""A turn stopped while a server tool ran, then the conversation's next turn, as Open WebUI
sends them: Stop closes the connection, and the next request's history leaves out the stopped
turn (Open WebUI drops a tool call it marked ``incomplete``). The next model call must see the
stopped call and its cancellation, on the same session, on chat completions and Responses."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store, sqlite_url
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

Message = dict[str, Any]
CHAT_ID = "chat-stopped"
OPENWEBUI = {"authorization": f"Bearer {KEY_ALICE}", "x-openwebui-chat-id": CHAT_ID}
FIRST, SECOND = "Run the long job.", "Never mind, say hello."


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="A long job: runs until it is cancelled.",
        parameters={"type": "object", "properties": {}},
        cancellable=True,
    )
    async def long_job(arguments: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(120)
        return "finished"

    @registry.tool(description="Look the weather up.", parameters={"type": "object"})
    async def weather(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "sunny, 21C"

    return registry


@pytest.fixture
def database(tmp_path: Path) -> str:
    return sqlite_url(tmp_path / "hermes.db")


@pytest.fixture
def served(simulator: SimulatorServer, database: str) -> Iterator[ThreadedServer]:
    services = make_services(simulator, database_url=database)
    services.profiles = [dataclasses.replace(services.profiles[0], tools=_tools())]
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(served: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=served.base_url, timeout=30) as client:
        yield client


def _script(simulator: SimulatorServer) -> None:
    steps = [
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="long_job", arguments={})])),
        Step(reply=Reply(text="Hello.")),
    ]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))


async def _stop_once_the_tool_runs(http: httpx.AsyncClient, path: str, body: Message) -> str:
    """Start a streamed turn, leave as soon as its tool card is shown (what Stop does), and
    return the run's id once the run has ended."""
    async with http.stream("POST", path, headers=OPENWEBUI, json=body) as response:
        assert response.status_code == 200
        run_id = response.headers["x-hermes-run-id"]
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"function_call"' in line:
                break
    await _until_ended(http, run_id)
    return run_id


async def _until_ended(http: httpx.AsyncClient, run_id: str) -> None:
    """Wait until the run has ended, stopped by its client's leaving."""
    deadline = time.monotonic() + 30
    while True:
        run = (await http.get(f"/v1/runs/{run_id}", headers=OPENWEBUI)).json()
        if run["status"] != "running" and run["status"] != "stopping":
            break
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.05)
    assert run["status"] == "interrupted", run


def _last_model_request(simulator: SimulatorServer) -> list[Message]:
    messages: list[Message] = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    return [message for message in messages if message["role"] != "system"]


def _assert_sees_the_cancelled_call(messages: list[Message]) -> None:
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[0]["content"] == FIRST
    (call,) = messages[1]["tool_calls"]
    assert call["function"]["name"] == "long_job"
    assert messages[2]["tool_call_id"] == call["id"]
    assert messages[2]["content"].startswith("Cancelled:")
    assert messages[3]["content"] == SECOND


async def _one_branch(database: str) -> list[str]:
    """The roles of the conversation's stored transcript, which must have no fork."""
    store = await Store.open(database, migrate=False)
    try:
        (branch,) = await store.sessions.tips("alice", CHAT_ID)
        return [m.message["role"] for m in await store.sessions.messages(branch.id)]
    finally:
        await store.close()


async def test_the_turn_after_a_stop_sees_the_cancelled_call_on_chat_completions(
    simulator: SimulatorServer, http: httpx.AsyncClient, database: str
) -> None:
    _script(simulator)
    first = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": FIRST}],
    }
    await _stop_once_the_tool_runs(http, "/v1/chat/completions", first)
    # What Open WebUI sends next: the stopped turn had only the incomplete call, so it is gone.
    history = [{"role": "user", "content": FIRST}, {"role": "user", "content": SECOND}]
    second = await http.post(
        "/v1/chat/completions",
        headers=OPENWEBUI,
        json={"model": "hermes-agent", "messages": history},
    )
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "Hello."
    _assert_sees_the_cancelled_call(_last_model_request(simulator))
    roles = await _one_branch(database)
    assert roles == ["user", "assistant", "tool", "user", "assistant"]


async def test_the_turn_after_a_stop_sees_the_cancelled_call_on_responses(
    simulator: SimulatorServer, http: httpx.AsyncClient, database: str
) -> None:
    _script(simulator)
    first = {
        "model": "hermes-agent",
        "stream": True,
        "input": [{"type": "message", "role": "user", "content": FIRST}],
    }
    await _stop_once_the_tool_runs(http, "/v1/responses", first)
    # Open WebUI's Responses input for the same history: the stopped turn left out.
    history = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": FIRST}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": SECOND}]},
    ]
    second = await http.post(
        "/v1/responses",
        headers=OPENWEBUI,
        json={"model": "hermes-agent", "input": history},
    )
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "completed"
    _assert_sees_the_cancelled_call(_last_model_request(simulator))
    roles = await _one_branch(database)
    assert roles == ["user", "assistant", "tool", "user", "assistant"]


async def test_the_stored_transcript_of_a_stopped_turn_answers_its_call_as_cancelled(
    simulator: SimulatorServer, http: httpx.AsyncClient, database: str
) -> None:
    _script(simulator)
    first = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": FIRST}],
    }
    await _stop_once_the_tool_runs(http, "/v1/chat/completions", first)
    store = await Store.open(database, migrate=False)
    try:
        (branch,) = await store.sessions.tips("alice", CHAT_ID)
        stored = [m.message for m in await store.sessions.messages(branch.id)]
    finally:
        await store.close()
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    (call,) = stored[1]["tool_calls"]
    assert stored[2]["tool_call_id"] == call["id"]
    assert "interrupted" in json.dumps(stored[2]["content"])


async def test_a_reply_stopped_as_it_streamed_after_a_tool_is_kept_as_the_client_saw_it(
    simulator: SimulatorServer, http: httpx.AsyncClient, database: str
) -> None:
    reply = "It is sunny in Paris today, and rather warm for the season."
    steps = [
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="weather", arguments={})])),
        Step(reply=Reply(text=reply, chunk_count=12), fault=Fault(chunk_delay=0.2)),
        Step(reply=Reply(text="Hello.")),
    ]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))
    first = [{"role": "user", "content": FIRST}]
    body = {"model": "hermes-agent", "stream": True, "messages": first}
    shown, call_id = "", ""
    async with http.stream("POST", "/v1/chat/completions", headers=OPENWEBUI, json=body) as sent:
        run_id = sent.headers["x-hermes-run-id"]
        async for line in sent.aiter_lines():
            frame = json.loads(line[6:]) if line.startswith("data: {") else {}
            item = frame.get("item") or {}
            call_id = item.get("call_id", call_id)
            for choice in frame.get("choices") or ():
                shown += choice["delta"].get("content") or ""
            if shown:
                break  # Stop, as the answer streams
    await _until_ended(http, run_id)
    # Open WebUI's next history: the call and its result, then the text it got.
    history = [
        *first,
        {"role": "assistant", "content": "", "tool_calls": [_call(call_id, "weather")]},
        {"role": "tool", "tool_call_id": call_id, "content": "sunny, 21C"},
        {"role": "assistant", "content": shown},
        {"role": "user", "content": SECOND},
    ]
    second = await http.post(
        "/v1/chat/completions",
        headers=OPENWEBUI,
        json={"model": "hermes-agent", "messages": history},
    )
    assert second.status_code == 200, second.text
    messages = _last_model_request(simulator)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[3]["content"] == shown
    assert reply.startswith(shown)
    assert shown != reply  # stopped part way
    roles = await _one_branch(database)
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]


def _call(call_id: str, name: str) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}
