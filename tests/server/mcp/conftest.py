"""A real ``hermes-server serve`` process whose profiles use MCP servers written with the
official SDK: one started over stdio by the server, one over streamable HTTP started by the
test, and one that cannot start (its tools are simply missing; the rest works)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import http_client, pid_alive, sdk_client, tool_results_of

UPSTREAM = "mcp-agent"
KEY = "sk-mcp-alice-0123456789"
MODEL = "hermes-agent"
BROKEN_MODEL = "hermes-broken-mcp"
REPO = Path(__file__).parents[3]

CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
web:
  allow: ["127.0.0.1"]  # where the tests' MCP servers listen; 127.0.0.2 stays refused
  mcp_connect_timeout_seconds: 3  # a request's server that never answers is a 424 sooner
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
        return pid_alive(self.pid)

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
async def openai(mcp_server: McpServerProcess) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(mcp_server.base_url, KEY) as client:
        yield client


@pytest.fixture
async def http(mcp_server: McpServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(mcp_server.base_url, KEY) as client:
        yield client


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def tool_results(simulator: SimulatorServer) -> list[str]:
    return tool_results_of(simulator, UPSTREAM)
