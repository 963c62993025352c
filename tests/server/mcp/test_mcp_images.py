"""An MCP tool's image content reaches the upstream model as an image, through a real server
process and the stdio MCP server of the tests."""

from __future__ import annotations

import base64

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.pictures import PNG
from tests.server.mcp.conftest import MODEL, UPSTREAM, McpServerProcess, script
from tests.server.served import answer, call, until

pytestmark = pytest.mark.slow


async def test_an_mcp_image_is_sent_upstream_as_an_image_part(
    http: httpx.AsyncClient, simulator: SimulatorServer, mcp_server: McpServerProcess
) -> None:
    async def workshop_up() -> bool:
        ready = (await http.get("/ready")).json()
        return any(
            s["profile"] == MODEL and s["server"] == "workshop" and s["up"]
            for s in ready["mcp_servers"]
        )

    assert await until(workshop_up, server=mcp_server)
    script(simulator, call("workshop__picture"), answer("a pixel"))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "show me"}]}
    response = await http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    after_tool = simulator.state.requests(scenario=UPSTREAM)[-1].body["messages"]
    tool, images = after_tool[-2:]
    assert tool["role"] == "tool"
    assert tool["content"].startswith("[image: image/png, 70 bytes]")
    assert images["role"] == "user"
    url = images["content"][1]["image_url"]["url"]
    assert url == f"data:image/png;base64,{base64.b64encode(PNG).decode()}"
