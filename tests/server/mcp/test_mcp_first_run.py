"""The first run after a start, sent while the profile's MCP server is still connecting, waits
for it and is offered its tools (it used to get none of them, silently)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from server.simulator import Scenario, SimulatorServer
from tests.processes import free_port, hermes_command, wait_until_healthy
from tests.server.served import answer, http_client

pytestmark = pytest.mark.slow

UPSTREAM = "mcp-first-run"
KEY = "sk-mcp-first-0123456789"
REPO = Path(__file__).parents[3]
START_DELAY_SECONDS = 4
"""How long the MCP server takes to start: longer than the server takes to answer /health."""

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
  - id: hermes-agent
    providers: [sim]
    mcp_servers:
      - name: workshop
        command: {python}
        args: ["-m", "tests.mcp_servers.workshop", "stdio"]
        cwd: {repo}
        env: {{WORKSHOP_START_DELAY: "{delay}", WORKSHOP_MARKS: "{data}/marks"}}
        connect_timeout_seconds: 60
"""


async def test_a_run_sent_while_an_mcp_server_connects_waits_and_is_offered_its_tools(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=tmp_path,
            key=KEY,
            upstream=UPSTREAM,
            simulator=simulator.base_url,
            python=sys.executable,
            repo=REPO,
            delay=START_DELAY_SECONDS,
        )
    )
    simulator.state.script(UPSTREAM, Scenario(steps=[answer("the tools are here")]))
    port, log = free_port(), tmp_path / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log, wait=False) as p:
        base = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_until_healthy, base, process=p)
        async with http_client(base, KEY) as http:
            ready = (await http.get("/ready")).json()
            assert [s["up"] for s in ready["mcp_servers"]] == [False]  # still connecting
            body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]}
            response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "the tools are here"
    (first,) = simulator.state.requests(scenario=UPSTREAM)
    offered = {tool["function"]["name"] for tool in first.body.get("tools", [])}
    assert {"workshop__add", "workshop__slow"} <= offered
