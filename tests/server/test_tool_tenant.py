"""A run's tools work for the key that started it: what tools share between tenants (the page
readers' turns, ``hermes_core/tools/fair_threads.py``) tells the tenants apart by it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.tools.tenant import current_tenant
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services


@pytest.fixture
def server(_simulator_server: SimulatorServer) -> Iterator[ThreadedServer]:
    registry = ToolRegistry()

    @registry.tool(description="Say whom the tools work for.", parameters={"type": "object"})
    async def tenant(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"working for {current_tenant()!r}"

    services = make_services(_simulator_server)
    (profile,) = services.profiles
    services.profiles = [dataclasses.replace(profile, tools=registry)]
    with ThreadedServer(create_app(services)) as running:
        yield running


@pytest.mark.parametrize(("key", "principal"), [(KEY_ALICE, "alice"), (KEY_BOB, "bob")])
async def test_a_runs_tools_work_for_the_key_that_started_it(
    server: ThreadedServer, simulator: SimulatorServer, key: str, principal: str
) -> None:
    steps = [
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="tenant", arguments={})])),
        Step(reply=Reply(text="done")),
    ]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        done = await http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "hermes-agent", "messages": [{"role": "user", "content": "who?"}]},
        )
    assert done.status_code == 200, done.text
    tool_result = simulator.state.requests()[-1].body["messages"][-1]
    assert tool_result["role"] == "tool"
    assert tool_result["content"] == f"working for {principal!r}"
