"""A real ``hermes-server serve`` process whose profiles use MCP servers written with the
official SDK: one started over stdio by the server, one over streamable HTTP started by the
test, and one that cannot start (its tools are simply missing; the rest works)."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from server.simulator import Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command

UPSTREAM = "mcp-agent"
KEY = "sk-mcp-alice-0123456789"
MODEL = "hermes-agent"
BROKEN_MODEL = "hermes-broken-mcp"
AUTH = {"authorization": f"Bearer {KEY}"}
REPO = Path(__file__).parents[3]

CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    mcp_servers:
      - name: workshop
        command: {python}
        args: ["-m", "tests.mcp_servers.workshop", "stdio"]
        cwd: {repo}
        env: {{WORKSHOP_MARKS: "{marks}"}}
        exclude: [secret_admin]
        timeout_seconds: 60
      - name: remote
        url: {remote}
        headers: {{X-Team: "${{MCP_TEAM_TOKEN}}"}}
        include: [add, whoami, slow]
  - id: {broken_model}
    providers: [sim]
    mcp_servers:
      - name: ghost
        command: /nonexistent/mcp-server
        connect_timeout_seconds: 2
"""


@dataclass(frozen=True, slots=True)
class McpServerProcess:
    base_url: str
    marks: Path
    log: Path
    pid: int

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def marks_of(self, tag: str) -> list[str]:
        path = self.marks / tag
        return path.read_text().split() if path.exists() else []


@pytest.fixture(scope="session")
def remote_mcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The workshop served over streamable HTTP, as a process of its own."""
    port = free_port()
    marks = tmp_path_factory.mktemp("remote-marks")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.mcp_servers.workshop", "http", str(port)],
        cwd=REPO,
        env={**os.environ, "WORKSHOP_MARKS": str(marks)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            httpx.get(url, timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def mcp_server(
    _simulator_server: SimulatorServer,
    remote_mcp: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[McpServerProcess]:
    data = tmp_path_factory.mktemp("mcp-server")
    marks = data / "marks"
    config = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            model=MODEL,
            broken_model=BROKEN_MODEL,
            python=sys.executable,
            repo=REPO,
            marks=marks,
            remote=remote_mcp,
        )
    )
    port, log = free_port(), data / "server.log"
    env = {"MCP_TEAM_TOKEN": "team-token-0123456789"}
    with hermes_command("serve", "--config", str(config), port=port, log=log, env=env) as p:
        yield McpServerProcess(f"http://127.0.0.1:{port}", marks, log, p.pid)


@pytest.fixture
async def http(mcp_server: McpServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mcp_server.base_url, headers=AUTH, timeout=60) as c:
        yield c


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def tool_results(simulator: SimulatorServer) -> list[str]:
    requests = simulator.state.requests(scenario=UPSTREAM)
    messages = requests[-1].body.get("messages", []) if requests else []
    return [str(m.get("content")) for m in messages if m.get("role") == "tool"]


async def until(
    predicate: Callable[[], Awaitable[bool] | bool],
    *,
    server: McpServerProcess,
    seconds: float = 30,
) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        held = predicate()
        if inspect.isawaitable(held):
            held = await held
        if held or time.monotonic() >= deadline:
            return bool(held)
        if not server.alive():
            raise AssertionError(f"the server process died; see {server.log}")
        await asyncio.sleep(0.05)
