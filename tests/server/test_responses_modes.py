"""Opt-in renderings of server tool progress on /v1/responses: structured ``hermes:`` events,
and Open WebUI's tool cards. By default neither appears (see test_responses.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


def _script(simulator: SimulatorServer) -> None:
    lookup = ToolCallSpec(name="lookup", arguments={"word": "ibis"})
    steps = [Step(reply=Reply(tool_calls=[lookup])), Step(reply=Reply(text="Ibises are fine."))]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))


async def _events(hermes: ThreadedServer, headers: dict[str, str]) -> list[dict[str, Any]]:
    body = {"model": "hermes-agent", "input": "check ibis", "stream": True}
    sent = {"authorization": f"Bearer {KEY_ALICE}", **headers}
    events: list[dict[str, Any]] = []
    async with (
        httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http,
        http.stream("POST", "/v1/responses", json=body, headers=sent) as response,
    ):
        name = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: ") and line != "data: [DONE]":
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == name  # `event:` always equals the type
                events.append(event)
    return events


async def test_events_mode_adds_structured_tool_progress(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator)
    events = await _events(hermes, {"x-hermes-progress": "events"})
    progress = [e for e in events if e["type"] == "hermes:tool_progress"]
    assert [(e["phase"], e["name"]) for e in progress] == [
        ("started", "lookup"),
        ("finished", "lookup"),
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert "function_call" not in [item["type"] for item in final["output"]]


async def test_openwebui_mode_shows_server_tools_as_completed_cards(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator)
    events = await _events(hermes, {"x-openwebui-chat-id": "owui-1"})
    final = events[-1]["response"]
    kinds = [item["type"] for item in final["output"]]
    assert "function_call" in kinds
    assert "function_call_output" in kinds
    output = next(item for item in final["output"] if item["type"] == "function_call_output")
    assert "definition of ibis" in output["output"][0]["text"]
    assert all(item["status"] == "completed" for item in final["output"])


async def test_a_quiet_stream_gets_keep_alive_comments(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    wait = ToolCallSpec(name="wait", arguments={"seconds": 0.6})
    steps = [Step(reply=Reply(tool_calls=[wait])), Step(reply=Reply(text="Done."))]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))
    body = {"model": "hermes-agent", "input": "wait", "stream": True}
    lines: list[str] = []
    async with (
        httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http,
        http.stream(
            "POST", "/v1/responses", json=body, headers={"authorization": f"Bearer {KEY_ALICE}"}
        ) as response,
    ):
        lines = [line async for line in response.aiter_lines()]
    assert ": keep-alive" in lines  # while the tool runs (the test server's interval: 0.2 s)
    assert [line for line in lines if line][-1] == "data: [DONE]"
