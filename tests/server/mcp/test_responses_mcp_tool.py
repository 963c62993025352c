"""The Responses API's own MCP tool: a client names an MCP server in ``tools`` and the server
connects to it for the request — listing its tools (``mcp_list_tools``), calling them
(``mcp_call``), asking first when approval is required (``mcp_approval_request``, answered by
``mcp_approval_response`` on the next request) — and never to an internal address."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.responses.tool import Mcp

from server.simulator import SimulatorServer
from tests.processes import free_port
from tests.server.mcp.conftest import MODEL, script, tool_results
from tests.server.served import answer, call

pytestmark = pytest.mark.slow


def mcp_tool(url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "lab", "server_url": url, **fields}


async def test_an_mcp_tool_is_listed_and_called_with_the_standard_items_and_events(
    openai: AsyncOpenAI, http: httpx.AsyncClient, simulator: SimulatorServer, remote_mcp: str
) -> None:
    script(simulator, call("lab__add", a=20, b=22), answer("It is 42."))
    tools: Any = [mcp_tool(remote_mcp, require_approval="never", allowed_tools=["add", "slow"])]
    kinds: list[str] = []
    async with openai.responses.stream(model=MODEL, input="add", tools=tools) as stream:
        async for event in stream:
            kinds.append(event.type)
        response = await stream.get_final_response()

    listing, mcp_call, message = response.output
    assert listing.type == "mcp_list_tools"
    assert listing.server_label == "lab"
    assert sorted(t.name for t in listing.tools) == ["add", "slow"]
    assert mcp_call.type == "mcp_call"
    assert (mcp_call.server_label, mcp_call.name, mcp_call.output) == ("lab", "add", "42")
    assert mcp_call.error is None
    assert message.type == "message"
    assert response.output_text == "It is 42."
    for kind in (
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ):
        assert kind in kinds
    offered = {t["function"]["name"] for t in simulator.state.requests()[0].body["tools"]}
    assert {"lab__add", "lab__slow"} <= offered
    assert "lab__whoami" not in offered  # not in allowed_tools
    metrics = (await http.get("/metrics")).text
    assert "lab__add" not in metrics  # a client's names never make a series of their own
    assert 'hermes_tool_calls_total{outcome="success",tool="other",toolset="mcp"}' in metrics
    [echoed] = response.tools
    assert isinstance(echoed, Mcp)
    assert echoed.headers is None  # never echoed: they may hold credentials


async def test_approval_required_then_approved_on_the_next_request(
    openai: AsyncOpenAI, simulator: SimulatorServer, remote_mcp: str
) -> None:
    tools: Any = [mcp_tool(remote_mcp, headers={"X-Team": "secret-team-token"})]
    script(simulator, call("lab__add", a=2, b=3), answer("unreached"))
    first = await openai.responses.create(model=MODEL, input="add 2 and 3", tools=tools)
    [ask] = [item for item in first.output if item.type == "mcp_approval_request"]
    assert (ask.server_label, ask.name) == ("lab", "add")
    assert '"a": 2' in ask.arguments
    assert not [item for item in first.output if item.type == "mcp_call"]
    assert "secret-team-token" not in first.model_dump_json()

    script(simulator, answer("The sum is 5."))
    second = await openai.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": True}],
    )
    [done] = [item for item in second.output if item.type == "mcp_call"]
    assert (done.name, done.output) == ("add", "5")
    assert second.output_text == "The sum is 5."
    assert tool_results(simulator)[-1] == "5"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/mcp",
        "http://127.0.0.2:{port}/mcp",
        "http://[::1]:{port}/mcp",
        "http://[::ffff:10.1.2.3]/mcp",
    ],
)
async def test_an_mcp_server_at_an_internal_address_is_refused(
    http: httpx.AsyncClient, remote_mcp: str, url: str
) -> None:
    port = remote_mcp.split(":")[2].split("/")[0]
    body = {"model": MODEL, "input": "hi", "tools": [mcp_tool(url.format(port=port))]}
    response = await http.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "tools"
    assert "refused to connect" in error["message"]


async def test_an_mcp_server_that_does_not_answer_is_a_424(http: httpx.AsyncClient) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"  # allow-listed, but nothing listens
    body = {"model": MODEL, "input": "hi", "tools": [mcp_tool(url)]}
    response = await http.post("/v1/responses", json=body)
    assert response.status_code == 424, response.text
    assert response.json()["error"]["code"] == "mcp_server_unavailable"


async def test_a_label_clashing_with_the_models_own_mcp_server_is_refused(
    http: httpx.AsyncClient, remote_mcp: str
) -> None:
    tool = {"type": "mcp", "server_label": "workshop", "server_url": remote_mcp}
    response = await http.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "tools": [tool]}
    )
    assert response.status_code == 400
    assert "already used" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("tool", "says"),
    [
        ({"type": "mcp", "server_url": "http://x.example/mcp"}, "server_label"),
        ({"type": "mcp", "server_label": "w"}, "server_url"),
        ({"type": "mcp", "server_label": "w", "server_url": "ftp://x/"}, "server_url"),
        (
            {"type": "mcp", "server_label": "w", "connector_id": "connector_gmail"},
            "Connectors",
        ),
        (
            {"type": "mcp", "server_label": "w", "server_url": "http://x/", "headers": [1]},
            "headers",
        ),
        (
            {
                "type": "mcp",
                "server_label": "w",
                "server_url": "http://x/",
                "require_approval": "sometimes",
            },
            "require_approval",
        ),
        (
            [{"type": "mcp", "server_label": f"s{n}", "server_url": "http://x/"} for n in range(9)],
            "At most 8",
        ),
    ],
)
async def test_a_malformed_mcp_tool_is_a_400_naming_the_fault(
    http: httpx.AsyncClient, tool: dict[str, Any] | list[dict[str, Any]], says: str
) -> None:
    tools = tool if isinstance(tool, list) else [tool]
    body = {"model": MODEL, "input": "hi", "tools": tools}
    response = await http.post("/v1/responses", json=body)
    assert response.status_code == 400, response.text
    assert says in response.json()["error"]["message"]
