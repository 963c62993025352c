"""MCP servers' tools in real runs: over stdio and streamable HTTP, with progress, images,
filters, a crash survived, a stop that cancels the call on the MCP server, and /ready saying
which server is down and why."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.server.mcp.conftest import (
    BROKEN_MODEL,
    MODEL,
    McpServerProcess,
    script,
    tool_results,
)
from tests.server.served import answer, call, calls, sse_data, until

pytestmark = pytest.mark.slow


async def ask(http: httpx.AsyncClient, model: str = MODEL) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": "use the tools"}]}
    response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    completion: dict[str, Any] = response.json()
    return completion


async def servers_up(http: httpx.AsyncClient) -> dict[str, bool]:
    ready = (await http.get("/ready")).json()
    return {f"{s['profile']}/{s['server']}": s["up"] for s in ready["mcp_servers"]}


@pytest.fixture
async def connected(http: httpx.AsyncClient, mcp_server: McpServerProcess) -> None:
    async def both_up() -> bool:
        up = await servers_up(http)
        return up.get(f"{MODEL}/workshop", False) and up.get(f"{MODEL}/remote", False)

    assert await until(both_up, server=mcp_server), (await http.get("/ready")).json()


@pytest.mark.usefixtures("connected")
async def test_tools_of_a_stdio_and_an_http_server_are_called_in_a_run(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        calls(("workshop__add", {"a": 2, "b": 3}), ("remote__add", {"a": 40, "b": 2})),
        answer("5 and 42"),
    )
    completion = await ask(http)
    assert completion["hermes"]["exit_reason"] == "completed"
    assert tool_results(simulator) == ["5", "42"]
    offered = {t["function"]["name"] for t in simulator.state.requests()[0].body["tools"]}
    assert {"workshop__add", "workshop__slow", "remote__add", "remote__whoami"} <= offered
    assert "workshop__secret_admin" not in offered  # excluded
    assert "remote__picture" not in offered  # not included
    metrics = (await http.get("/metrics")).text
    assert 'tool="workshop__add",toolset="mcp:workshop"' in metrics


@pytest.mark.usefixtures("connected")
async def test_mcp_progress_is_streamed_as_tool_progress(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, call("workshop__count_up", steps=3), answer("done"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "count"}]}
    response = await http.post("/v1/chat/completions", json=body)
    progress = [
        c["choices"][0]["delta"]["hermes"]
        for c in sse_data(response.text)
        if c.get("choices") and "hermes" in c["choices"][0]["delta"]
    ]
    outputs = "".join(p.get("output") or "" for p in progress)
    assert "step 1 of 3 (1/3)" in outputs
    assert "step 3 of 3 (3/3)" in outputs
    assert tool_results(simulator) == ["counted to 3"]


@pytest.mark.usefixtures("connected")
async def test_images_and_errors_are_turned_into_text_for_the_model(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, calls(("workshop__picture", {}), ("workshop__fail", {})), answer("ok"))
    await ask(http)
    picture, failure = tool_results(simulator)
    assert picture.startswith("[image: image/png, ")
    assert failure.startswith("Error:")


@pytest.mark.usefixtures("connected")
async def test_stop_during_a_slow_mcp_call_cancels_it_on_the_mcp_server(
    http: httpx.AsyncClient, simulator: SimulatorServer, mcp_server: McpServerProcess
) -> None:
    tag = f"stop-{uuid.uuid4().hex[:8]}"
    script(simulator, call("workshop__slow", seconds=60, tag=tag), answer("unreachable"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "wait"}]}
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        assert await until(lambda: "started" in mcp_server.marks_of(tag), server=mcp_server)
        assert (await http.post(f"/v1/runs/{run_id}/stop")).status_code == 202
        frames = sse_data("\n".join([line async for line in lines]))
    assert frames[-1]["hermes"]["exit_reason"] == "interrupted"
    assert await until(lambda: "cancelled" in mcp_server.marks_of(tag), server=mcp_server)
    assert "finished" not in mcp_server.marks_of(tag)


@pytest.mark.usefixtures("connected")
async def test_a_crashed_stdio_server_is_restarted_while_the_other_keeps_working(
    http: httpx.AsyncClient, simulator: SimulatorServer, mcp_server: McpServerProcess
) -> None:
    script(simulator, call("workshop__whoami"), answer("noted"))
    await ask(http)
    [before] = tool_results(simulator)

    script(
        simulator, calls(("workshop__crash", {}), ("remote__add", {"a": 1, "b": 1})), answer("x")
    )
    await ask(http)
    crashed, other = tool_results(simulator)
    assert crashed.startswith("Error: MCP server 'workshop' went away")
    assert other == "2"

    script(simulator, call("workshop__whoami"), answer("back"))
    completion = await ask(http)
    [after] = tool_results(simulator)
    assert completion["hermes"]["exit_reason"] == "completed"
    assert after.startswith("pid ")
    assert after != before  # a new process answers


async def test_a_server_that_cannot_start_is_reported_and_does_not_block_runs(
    http: httpx.AsyncClient, simulator: SimulatorServer, mcp_server: McpServerProcess
) -> None:
    async def reported() -> bool:
        ready = (await http.get("/ready")).json()
        ghost = [s for s in ready["mcp_servers"] if s["server"] == "ghost"]
        return bool(ghost and ghost[0]["error"] and "not found" in ghost[0]["error"])

    assert await until(reported, server=mcp_server)
    ready = await http.get("/ready")
    assert ready.status_code == 200
    assert ready.json()["status"] == "degraded"
    script(simulator, answer("I have no MCP tools, but I answer."))
    completion = await ask(http, BROKEN_MODEL)
    assert completion["choices"][0]["message"]["content"] == "I have no MCP tools, but I answer."
