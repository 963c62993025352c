"""A stdio MCP server that never answers its handshake: the connect timeout fails it, the
half-open connection is torn down (its process killed) so that the next attempt starts a new
one, and stopping the connection is bounded instead of waiting for the process to exit, and
leaves no process object behind for the event loop's close to find still running."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
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


def parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


def subprocess_transports(pid: int) -> list[asyncio.SubprocessTransport]:
    """This process's asyncio transports for the child ``pid`` (the SDK keeps its own)."""
    return [
        found
        for found in gc.get_objects()
        if isinstance(found, asyncio.SubprocessTransport) and found.get_pid() == pid
    ]


async def test_a_stop_during_a_handshake_closes_the_servers_process_before_it_returns(
    tmp_path: Path,
) -> None:
    # The server's child leaves its process group and keeps the server's stdout open, so only
    # the SDK's own shutdown (not the pipes' end) closes the process's transport; and the
    # connect timeout falls due while that shutdown waits for the server to exit. A transport
    # left open, or a process whose exit the loop has not heard, is "still running" once the
    # loop is gone: a ResourceWarning at collection, in whatever test runs next.
    script = tmp_path / f"mute_{os.getpid()}_{time.monotonic_ns()}.py"
    script.write_text(
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "while True:\n"
        "    time.sleep(1)\n"
    )
    marker = script.name
    spec = McpServerSpec(
        name="mute", command=sys.executable, args=(str(script),), connect_timeout_seconds=1.0
    )
    connection = McpConnection(spec)
    connection.start()
    try:
        assert await until(lambda: len(running(marker)) == 2, 10)
        (server,) = [pid for pid in running(marker) if parent(pid) == os.getpid()]
        await connection.stop()
        left = [t for t in subprocess_transports(server) if not t.is_closing()]
        assert left == []
        assert [t for t in subprocess_transports(server) if t.get_returncode() is None] == []
    finally:
        for pid in running(marker):
            os.kill(pid, signal.SIGKILL)
