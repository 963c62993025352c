"""A stdio MCP server that never answers its handshake: the connect timeout fails it, the
half-open connection is torn down (its process killed) so that the next attempt starts a new
one, and stopping the connection is bounded instead of waiting for the process to exit."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hermes_core.tools.mcp.connection import McpConnection
from hermes_core.tools.mcp.spec import McpServerSpec


def running(marker: str) -> set[int]:
    """Pids of live (not zombie) processes whose command line carries ``marker``."""
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    found.add(int(name))
        except OSError:
            continue  # gone meanwhile
    return found


async def until(predicate: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_server_that_never_answers_is_killed_and_retried(tmp_path: Path) -> None:
    # The marker is in the script's path, so the cmdline finds only this test's processes.
    script = tmp_path / f"mute_{os.getpid()}_{time.monotonic_ns()}.py"
    script.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    marker = script.name
    spec = McpServerSpec(
        name="mute", command=sys.executable, args=(str(script),), connect_timeout_seconds=1.0
    )
    connection = McpConnection(spec)
    connection.start()
    try:
        assert await until(lambda: bool(running(marker)), 10)
        first = running(marker)
        assert await connection.until_settled()
        assert await until(lambda: connection.error == "no answer in time", 10)
        # The timed-out attempt's process goes, and the next attempt starts a new one.
        assert await until(lambda: not running(marker) & first, 10), running(marker)
        assert await until(lambda: bool(running(marker) - first), 10)
    finally:
        started = time.monotonic()
        await connection.stop()
        took = time.monotonic() - started
    assert took < 10
    assert await until(lambda: not running(marker), 5), running(marker)


async def test_stopping_during_a_stuck_handshake_is_bounded(tmp_path: Path) -> None:
    script = tmp_path / f"mute_{os.getpid()}_{time.monotonic_ns()}.py"
    script.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    marker = script.name
    spec = McpServerSpec(
        name="mute", command=sys.executable, args=(str(script),), connect_timeout_seconds=60.0
    )
    connection = McpConnection(spec)
    connection.start()
    assert await until(lambda: bool(running(marker)), 10)
    started = time.monotonic()
    await connection.stop()
    assert time.monotonic() - started < 10
    assert await until(lambda: not running(marker), 5), running(marker)
    assert connection.error is not None
