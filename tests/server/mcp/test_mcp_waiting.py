"""How long a run that starts while its profile's MCP server connects waits: not past the
connect timeout, not past a stop, and not at all once the server's first attempt ended."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import ExitReason, InterruptSource
from hermes_core.providers.scripted import ScriptedProvider
from hermes_core.tools.mcp.spec import McpServerSpec
from hermes_core.tools.mcp.toolset import McpToolset
from server.profiles import Profile, Stores
from server.runs.manager import RunManager
from server.runs.mcp_waiting import McpWaitingAgent


@pytest.fixture
async def silent_url() -> AsyncIterator[str]:
    """An "MCP server" that takes connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.fixture
async def silent_server(silent_url: str) -> AsyncIterator[McpToolset]:
    toolset = McpToolset([McpServerSpec(name="silent", url=silent_url)])
    toolset.start()
    try:
        yield toolset
    finally:
        await toolset.stop()


def _profile(toolset: McpToolset, provider: ScriptedProvider) -> Profile:
    return Profile(id="p", provider=provider, mcp=toolset)


async def test_a_stop_ends_a_runs_wait_for_a_connecting_server(
    silent_server: McpToolset,
) -> None:
    provider = ScriptedProvider("never asked")
    agent = _profile(silent_server, provider).new_agent(owner="a", stores=Stores())
    assert isinstance(agent, McpWaitingAgent)
    manager = RunManager()
    run = manager.start(
        agent, AgentRequest(user_message="hi"), owner="a", endpoint="test", model="p"
    )
    await asyncio.sleep(0)  # the run is now waiting for the server
    manager.stop(run, InterruptSource.STOP_API)
    async with asyncio.timeout(10):
        end = await run.until_finished()
    assert end.exit_reason is ExitReason.INTERRUPTED
    assert provider.requests == []


async def test_a_run_waits_no_longer_than_the_connect_timeout(silent_url: str) -> None:
    toolset = McpToolset(
        [McpServerSpec(name="silent", url=silent_url, connect_timeout_seconds=0.5)]
    )
    toolset.start()
    try:
        provider = ScriptedProvider("answered without it")
        agent = _profile(toolset, provider).new_agent(owner="a", stores=Stores())
        run = RunManager().start(
            agent, AgentRequest(user_message="hi"), owner="a", endpoint="test", model="p"
        )
        async with asyncio.timeout(10):
            end = await run.until_finished()
        assert end.final_text == "answered without it"
    finally:
        await toolset.stop()


async def test_once_a_server_failed_to_connect_runs_do_not_wait_for_it() -> None:
    spec = McpServerSpec(name="ghost", command="/nonexistent/mcp-server")
    toolset = McpToolset([spec])
    toolset.start()
    try:
        async with asyncio.timeout(10):
            await toolset.until_settled()
        assert toolset.status() == {"ghost": "command not found: /nonexistent/mcp-server"}
        agent = _profile(toolset, ScriptedProvider("ok")).new_agent(owner="a", stores=Stores())
        assert type(agent) is Agent
    finally:
        await toolset.stop()
