"""A real ``hermes-server serve`` process with the files, shell and code toolsets on, in front
of the test's upstream simulator; and what the tool tests need to watch it.

The server is a separate process, as in production: the sandboxed commands it starts are its
children, so "nothing is left running" is checked across a real process boundary.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI

from hermes_core.tools.toolsets import sandbox_missing
from server.files.workspaces import conversation_workspace
from server.simulator import Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import (
    answer,
    call,
    calls,
    http_client,
    pid_alive,
    sdk_client,
    sse_data,
    tool_results_of,
    until,
)

__all__ = ["answer", "call", "calls", "sse_data", "until"]

UPSTREAM = "tools-agent"
"""The model the server's provider sends upstream: what tests script the simulator under."""
KEY = "sk-tools-alice-0123456789"
KEY_BOB = "sk-tools-bob-0123456789"
MODEL = "hermes-agent"
VICTIM_MODEL = "victim-agent"
"""A second profile, on its own upstream model that no test scripts (the simulator's default
policy answers it): what another tenant uses while an attack runs (see ``victims.py``)."""
VICTIM_UPSTREAM = "victim-upstream"
WORKSPACE_MB = 64
"""The tool profile's workspace quota (``sandbox.workspace_mb``): small, so tests fill it."""
AUTH = {"authorization": f"Bearer {KEY}"}

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
    - {{key: {key_bob}, principal: bob}}
  approval_timeout_seconds: 120
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
  - name: victim
    model: {victim_upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [files, shell, code]
    approvals: {{shell: dangerous, code: dangerous}}
    sandbox: {{timeout_seconds: 60, max_processes: 64, cpu_seconds: 30, sandbox_memory_mb: 512,
      workspace_mb: {workspace_mb}}}
  - id: {victim_model}
    providers: [victim]
    tools: [shell]
    approvals: {{shell: never}}
"""


@pytest.fixture(scope="session", autouse=True)
def _sandbox_here() -> None:
    reason = sandbox_missing()
    if reason is not None:
        if os.environ.get("HERMES_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here but unavailable: {reason}")
        pytest.skip(f"no sandbox here: {reason}")


@dataclass(frozen=True, slots=True)
class ToolServer:
    base_url: str
    data_dir: Path
    pid: int
    log: Path

    def workspace(self, conversation: str, owner: str = "alice") -> Path:
        return conversation_workspace(self.data_dir / "workspaces", owner, conversation)

    def alive(self) -> bool:
        return pid_alive(self.pid)


@pytest.fixture(scope="session")
def tool_server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ToolServer]:
    data = tmp_path_factory.mktemp("tool-server")
    config = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            key_bob=KEY_BOB,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            model=MODEL,
            victim_model=VICTIM_MODEL,
            victim_upstream=VICTIM_UPSTREAM,
            workspace_mb=WORKSPACE_MB,
        )
    )
    port, log = free_port(), data / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
        yield ToolServer(f"http://127.0.0.1:{port}", data, process.pid, log)


@pytest.fixture
async def http(tool_server: ToolServer) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(tool_server.base_url, KEY) as client:
        yield client


@pytest.fixture
async def openai(tool_server: ToolServer) -> AsyncIterator[AsyncOpenAI]:
    """The official SDK pointed at the tool server as alice."""
    async with sdk_client(tool_server.base_url, KEY) as client:
        yield client


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def tool_results(simulator: SimulatorServer) -> list[str]:
    """The tool results the model was shown in its last call (the conversation's so far)."""
    return tool_results_of(simulator, UPSTREAM)


def processes_running(marker: str) -> list[int]:
    """Pids of the processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
