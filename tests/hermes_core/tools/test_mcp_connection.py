"""One MCP server kept connected: a real workshop server over stdio, driven through
``McpConnection`` as the agent's tools drive it."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from hermes_core.tools.mcp.connection import McpConnection, McpUnavailable
from hermes_core.tools.mcp.spec import McpServerSpec

REPO = Path(__file__).parents[3]


@pytest.fixture
async def workshop(tmp_path: Path) -> AsyncIterator[McpConnection]:
    spec = McpServerSpec(
        name="workshop",
        command=sys.executable,
        args=("-m", "tests.mcp_servers.workshop", "stdio"),
        cwd=str(REPO),
        env={"WORKSHOP_MARKS": str(tmp_path)},
        timeout_seconds=1.0,
    )
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - a fixture's setup
        connection = McpConnection(spec, errlog=quiet)
        connection.start()
        try:
            assert await connection.wait_up(60), connection.error
            yield connection
        finally:
            await connection.stop()


async def until(predicate: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_changed_tool_list_is_listed_again(workshop: McpConnection) -> None:
    assert "say_hello" not in {t.name for t in workshop.tools}
    result = await workshop.call("learn", {"word": "hello"})
    assert not result.is_error
    assert await until(lambda: "say_hello" in {t.name for t in workshop.tools})


async def test_a_call_beyond_its_timeout_is_cancelled_on_the_server(
    workshop: McpConnection, tmp_path: Path
) -> None:
    with pytest.raises(TimeoutError):
        await workshop.call("slow", {"seconds": 30, "tag": "late"})
    marks = tmp_path / "late"
    assert await until(lambda: marks.exists() and "cancelled" in marks.read_text())


async def test_a_server_that_stays_down_fails_calls_with_the_reason(tmp_path: Path) -> None:
    spec = McpServerSpec(name="ghost", command="/nonexistent/server", connect_timeout_seconds=0.5)
    connection = McpConnection(spec)
    connection.start()
    try:
        assert await until(lambda: connection.error != "not connected yet")
        with pytest.raises(McpUnavailable, match="command not found: /nonexistent/server"):
            await connection.call("anything", {})
    finally:
        await connection.stop()
