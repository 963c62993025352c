"""How Open WebUI sees a run's progress, over real HTTP on both of its connection types (chat
completions, and ``api_type: responses``): status lines that a Stop cannot leave shimmering,
live output of a running tool, each step shown once, sub-agent cards that name their task."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from hermes_core.agent import AgentConfig
from hermes_core.events import ToolProgress
from hermes_core.persistence import sqlite_url
from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.profiles import Profile
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, make_services

UPSTREAM = "owui-upstream"
MODEL = "hermes-agent"


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Count, writing each step as it goes; with hold, then wait to be stopped.",
        parameters={
            "type": "object",
            "properties": {"steps": {"type": "integer"}, "hold": {"type": "boolean"}},
        },
        cancellable=True,
    )
    async def count(arguments: dict[str, Any], ctx: ToolContext) -> str:
        for step in range(1, int(arguments.get("steps", 3)) + 1):
            ctx.emit(ToolProgress, call_id=ctx.call_id, name="count", output=f"step {step}\n")
            await asyncio.sleep(0.05)
        if arguments.get("hold"):
            await asyncio.sleep(60)
        return "counted"

    @registry.tool(
        description="Remove a thing.",
        parameters={"type": "object", "properties": {"what": {"type": "string"}}},
        needs_approval=lambda arguments: "removes things",
    )
    async def remove(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"removed {arguments.get('what')}"

    return registry


def openwebui_server(simulator: SimulatorServer, data: Path) -> ThreadedServer:
    """A server whose agent counts, removes (after an approval) and retries once."""
    provider = create_provider(
        ProviderConfig(
            name="sim",
            model=UPSTREAM,
            api_mode="chat_completions",
            base_url=simulator.base_url + "/v1",
            api_key=SecretStr("upstream-key"),
            timeout=30,
        )
    )
    chain = FallbackChain(
        [provider], retry=RetryPolicy(base_delay=0.01, max_attempts=2), cooldowns=Cooldowns()
    )
    profile = Profile(id=MODEL, provider=chain, tools=_tools(), config=AgentConfig())
    services = make_services(
        simulator, profiles=[profile], database_url=sqlite_url(data / "hermes.db")
    )
    return ThreadedServer(create_app(services))


@pytest.fixture(scope="module")
def server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    with openwebui_server(_simulator_server, tmp_path_factory.mktemp("owui")) as running:
        yield running


def headers(chat_id: str) -> dict[str, str]:
    """What Open WebUI sends (its chat id names the conversation)."""
    return {"authorization": f"Bearer {KEY_ALICE}", "x-openwebui-chat-id": chat_id}


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def calls(name: str, **arguments: Any) -> Step:
    return Step(reply=Reply(tool_calls=[ToolCallSpec(name=name, arguments=arguments)]))


def says(text: str) -> Step:
    return Step(reply=Reply(text=text))


async def frames_of(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], chat_id: str
) -> AsyncIterator[dict[str, Any]]:
    """Each ``data:`` frame of a stream, as it arrives."""
    async with http.stream("POST", path, json=body, headers=headers(chat_id)) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line.removeprefix("data: "))


async def chat(server: ThreadedServer, chat_id: str, *said: str) -> list[dict[str, Any]]:
    """Every frame of one streamed chat turn; ``said`` alternates user and assistant."""
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": text} for i, text in enumerate(said)]
    body = {"model": MODEL, "stream": True, "messages": messages}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        return [f async for f in frames_of(http, "/v1/chat/completions", body, chat_id)]


async def respond(server: ThreadedServer, chat_id: str, *said: str) -> list[dict[str, Any]]:
    """Every event of one streamed Responses turn (Open WebUI's ``api_type: responses``);
    ``said`` alternates user and assistant."""
    roles = ("user", "assistant")
    history = [{"role": roles[i % 2], "content": text} for i, text in enumerate(said)]
    body = {"model": MODEL, "stream": True, "input": history}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        return [f async for f in frames_of(http, "/v1/responses", body, chat_id)]


def statuses(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open WebUI's status lines, as its stream handler finds them (``event`` on any line)."""
    return [f["event"]["data"] for f in frames if f.get("event", {}).get("type") == "status"]


def cards(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool cards' items (Open WebUI reads ``response.output_item.added``)."""
    return [
        f["item"]
        for f in frames
        if f.get("type") == "response.output_item.added"
        and f["item"]["type"] in ("function_call", "function_call_output")
    ]


async def run_status(server: ThreadedServer, run_id: str, wanted: str) -> str:
    """The run's status once it is ``wanted`` (or whatever it is at the deadline)."""
    deadline = time.monotonic() + 20
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        while True:
            run = await http.get(f"/v1/runs/{run_id}", headers=headers("any"))
            status: str = run.json()["status"]
            if status == wanted or time.monotonic() > deadline:
                return status
            await asyncio.sleep(0.05)


# --- A: a Stop while a tool runs --------------------------------------------------------------


async def test_a_stop_while_a_tool_runs_leaves_no_status_line_unfinished(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    script(simulator, calls("count", steps=2, hold=True), says("unreached"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "count"}]}
    seen: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http,
        http.stream(
            "POST", "/v1/chat/completions", json=body, headers=headers("owui-stop")
        ) as response,
    ):
        run_id = response.headers["x-hermes-run-id"]
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line.removeprefix("data: ")))
            if {"description": "count: step 2", "done": True} in statuses(seen):
                break  # the tool runs on, holding: Open WebUI's Stop closes the connection now
    assert await run_status(server, run_id, "interrupted") == "interrupted"

    # What Open WebUI keeps after a Stop is what it had: no line of it shimmers.
    assert statuses(seen)
    assert all(status["done"] is True for status in statuses(seen))
    assert not any("running" in s["description"].lower() for s in statuses(seen))
    assert [c["type"] for c in cards(seen)] == ["function_call"]  # Open WebUI closes it


# --- B: Responses connections --------------------------------------------------------------


async def test_a_responses_connection_shows_a_running_tools_output_as_status_lines(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    script(simulator, calls("count", steps=3), says("Three."))

    events = await respond(server, "owui-responses-live", "count")

    kinds = [(e["type"], e.get("item", {}).get("type")) for e in events]
    opened = kinds.index(("response.output_item.added", "function_call"))
    closed = kinds.index(("response.output_item.added", "function_call_output"))
    while_running = [s["description"] for s in statuses(events[opened:closed])]
    assert while_running == ["count 3", "count: step 1", "count: step 2", "count: step 3"]
    assert statuses(events)[-1] == {"description": "Done", "done": True}
    assert all(status["done"] is True for status in statuses(events))


async def test_a_responses_connection_keeps_the_models_reasoning_apart_from_tool_steps(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    thinks = Reply(reasoning="I should count.", tool_calls=[ToolCallSpec(name="count")])
    script(simulator, Step(reply=thinks), says("Counted."))

    events = await respond(server, "owui-responses-reasoning", "count")

    final = events[-1]["response"]["output"]
    reasoning = [item for item in final if item["type"] == "reasoning"]
    assert [[part["text"] for part in item["summary"]] for item in reasoning] == [
        ["I should count."]
    ]
    assert "count: step 3" in [s["description"] for s in statuses(events)]


# --- D: each step once; sub-agent cards -------------------------------------------------------


async def test_a_retry_shows_once_as_a_status_line_and_not_in_the_thought_block(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    script(simulator, Step(fault=Fault(status=503)), says("Hello."))

    frames = await chat(server, "owui-retry", "hi")

    retries = [s for s in statuses(frames) if "retrying" in s["description"]]
    assert len(retries) == 1
    reasoning = [
        f["choices"][0]["delta"].get("reasoning_content")
        for f in frames
        if f.get("choices") and f["choices"][0]["delta"].get("reasoning_content")
    ]
    assert reasoning == []


async def test_a_delegate_task_card_names_the_sub_agents_task(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    script(
        simulator,
        calls("delegate_task", goal="Count the owls", context="in the park"),
        says("Seven owls."),  # the sub-agent
        says("There are seven owls."),
    )

    frames = await chat(server, "owui-delegate", "how many owls?")

    call = next(c for c in cards(frames) if c["type"] == "function_call")
    assert call["name"] == "delegate_task"
    assert json.loads(call["arguments"])["task"] == "Count the owls"
