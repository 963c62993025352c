"""What hermes adds to an MCP tool call: the same server, the same tool, called directly with
the official SDK's client, then through the agent's tool (``McpToolset``: the supervised
connection, the per-call timeout, progress plumbing, the result turned into text).

Both paths call ``add`` on the test workshop server (``tests/mcp_servers/workshop.py``), one
call after another, over stdio and over streamable HTTP; reported per call: p50 and p99 wall
time, and the difference of the medians (what hermes adds).

    .venv/bin/python -m bench.mcp_latency [--calls 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from hermes_core.tools.mcp.spec import McpServerSpec
from hermes_core.tools.mcp.toolset import McpToolset
from hermes_core.tools.registry import ToolContext

REPO = Path(__file__).parents[1]
SERVER = [sys.executable, "-m", "tests.mcp_servers.workshop"]


async def _timed(calls: int, once: Callable[[int], Awaitable[object]]) -> list[float]:
    for warmup in range(20):
        await once(warmup)
    times = []
    for number in range(calls):
        started = time.perf_counter()
        await once(number)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def direct(target: StdioServerParameters | str, calls: int) -> list[float]:
    async with Client(target) as client:
        return await _timed(calls, lambda n: client.call_tool("add", {"a": n, "b": 1}))


async def through_hermes(spec: McpServerSpec, calls: int) -> list[float]:
    toolset = McpToolset([spec], errlog=open(os.devnull, "w"))  # noqa: SIM115, ASYNC230
    toolset.start()
    try:
        connection = toolset.connections[spec.name]
        if not await connection.wait_up(30):
            raise SystemExit(f"{spec.name} did not come up: {connection.error}")
        tool = next(t for t in toolset.tools() if t.name.endswith("__add"))
        ctx = ToolContext(
            run_id="bench", task_id="bench", call_id="c", is_interrupted=lambda: False
        )
        return await _timed(calls, lambda n: tool.handler({"a": n, "b": 1}, ctx))
    finally:
        await toolset.stop()


def _report(label: str, direct_ms: list[float], hermes_ms: list[float]) -> None:
    def p(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1]

    d50, h50 = statistics.median(direct_ms), statistics.median(hermes_ms)
    print(
        f"{label:<6} direct p50 {d50:.3f} ms p99 {p(direct_ms, 99):.3f} ms | "
        f"through hermes p50 {h50:.3f} ms p99 {p(hermes_ms, 99):.3f} ms | "
        f"added p50 {h50 - d50:+.3f} ms"
    )


async def main(calls: int) -> None:
    stdio = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], "stdio"], cwd=REPO)
    spec = McpServerSpec(
        name="bench", command=SERVER[0], args=(*SERVER[1:], "stdio"), cwd=str(REPO)
    )
    _report("stdio", await direct(stdio, calls), await through_hermes(spec, calls))

    port = 18765
    server = await asyncio.create_subprocess_exec(
        *SERVER, "http", str(port), cwd=REPO, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        await asyncio.sleep(2)
        http_spec = McpServerSpec(name="bench", url=url)
        _report("http", await direct(url, calls), await through_hermes(http_spec, calls))
    finally:
        server.terminate()
        await server.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    asyncio.run(main(parser.parse_args().calls))
