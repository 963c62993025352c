"""A real ``hermes-server serve`` process with the web toolset on, a local web site (allow-listed
loopback) and a fake SearXNG on that site, in front of the test's upstream simulator."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import http_client, pid_alive, sdk_client
from tests.web_site import WebSite, web_site

UPSTREAM = "web-agent"
KEY = "sk-web-alice-0123456789"
MODEL = "hermes-agent"
OPENWEBUI_MODEL = "hermes-webui"

CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
web:
  allow: ["127.0.0.1"]
  search: {{backend: searxng, url: "{site}"}}
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [web]
  - id: {openwebui_model}
    providers: [sim]
    tools: [web]
    openwebui: true
"""


@dataclass(frozen=True, slots=True)
class WebServer:
    base_url: str
    site: WebSite
    log: Path
    pid: int

    def alive(self) -> bool:
        return pid_alive(self.pid)


@pytest.fixture(scope="session")
def site() -> Iterator[WebSite]:
    with web_site() as served:
        yield served


@pytest.fixture(scope="session")
def web_server(
    _simulator_server: SimulatorServer, site: WebSite, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebServer]:
    data = tmp_path_factory.mktemp("web-server")
    config = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            site=site.base_url,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            model=MODEL,
            openwebui_model=OPENWEBUI_MODEL,
        )
    )
    port, log = free_port(), data / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
        yield WebServer(f"http://127.0.0.1:{port}", site, log, process.pid)


@pytest.fixture
async def http(web_server: WebServer) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(web_server.base_url, KEY) as client:
        yield client


@pytest.fixture
async def openai(web_server: WebServer) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(web_server.base_url, KEY) as client:
        yield client


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))
