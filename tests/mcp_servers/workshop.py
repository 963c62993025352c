"""A small MCP server written with the official SDK, for the MCP tests and bench.

``python -m tests.mcp_servers.workshop stdio`` or ``… http PORT``. Its tools: ``add``, a
``slow`` one that records its cancellation, one that reports progress, one that returns an
image, one that crashes the process, and one that changes the tool list.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image

from tests.pictures import PNG

MARKS = Path(os.environ.get("WORKSHOP_MARKS", "/tmp/workshop-marks"))
"""Where ``slow`` writes what happened to it (started / finished / cancelled)."""

server = MCPServer("workshop", instructions="Test tools.")


def mark(name: str, text: str) -> None:
    MARKS.mkdir(parents=True, exist_ok=True)
    with (MARKS / name).open("a") as file:
        file.write(text + "\n")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def whoami() -> str:
    """Which process answers (the tests restart crashed servers)."""
    return f"pid {os.getpid()}"


@server.tool()
async def slow(seconds: float, tag: str) -> str:
    """Wait, then answer; notes whether it was cancelled first."""
    mark(tag, "started")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        mark(tag, "cancelled")
        raise
    mark(tag, "finished")
    return f"waited {seconds} s"


@server.tool()
async def count_up(steps: int, ctx: Context) -> str:
    """Count, reporting progress at each step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
        await asyncio.sleep(0.05)
    return f"counted to {steps}"


@server.tool()
def picture() -> Image:
    """A one-pixel picture."""
    return Image(data=PNG, format="png")


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("the workshop is closed")


@server.tool()
def crash() -> str:
    """Ends the server process at once."""
    os._exit(3)


@server.tool()
async def learn(word: str, ctx: Context) -> str:
    """Adds a tool named ``say_<word>`` and tells clients the tool list changed."""

    def say() -> str:
        return word

    server.add_tool(say, name=f"say_{word}", description=f"Says {word}.")
    await ctx.notify_tools_changed()
    return f"learned say_{word}"


@server.tool()
def secret_admin() -> str:
    """A tool a profile's filter should hide."""
    return "admin"


if __name__ == "__main__":
    # A server that is slow to start (WORKSHOP_START_DELAY seconds before it answers at all),
    # for the runs that begin while it is still connecting.
    time.sleep(float(os.environ.get("WORKSHOP_START_DELAY", "0")))
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
