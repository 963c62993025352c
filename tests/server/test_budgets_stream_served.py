"""A key's budget used up in the middle of a streamed run, on a real ``serve`` process: what
the client's stream says, the run's record, the usage ledger and ``/metrics`` all agree on how
it ended and what it cost (docs/budgets.md, docs/usage.md)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.server.budgeted import budgeted_config
from tests.server.served import Served, http_client, script, sdk_client, serving, until

pytestmark = pytest.mark.slow

UPSTREAM = f"budgets-stream-{uuid.uuid4().hex[:8]}"
KEY = f"sk-budget-stream-{uuid.uuid4().hex}"
BUDGET_USD = 3
TODO = ToolCallSpec(name="todo", arguments={"todos": [{"id": "1", "content": "again"}]})
LOOP = Step(reply=Reply(tool_calls=[TODO], output_tokens=1000), repeat=20)
"""A run that calls a tool for ever: 1000 output tokens, 1 USD, a call."""


@pytest.fixture
def server(simulator: SimulatorServer, tmp_path: Path) -> Iterator[Served]:
    config = budgeted_config(simulator.base_url, UPSTREAM, KEY, BUDGET_USD)
    with serving(tmp_path, config) as served:
        yield served


async def test_a_budget_used_up_mid_stream_ends_it_incomplete_and_every_record_agrees(
    server: Served, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, LOOP)
    async with sdk_client(server.base_url, KEY) as client:
        stream = await client.responses.create(model="hermes-agent", input="loop", stream=True)
        events = [event async for event in stream]

    last = events[-1]
    assert last.type == "response.incomplete", last.type
    response = last.response
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_messages"
    hermes: dict[str, Any] = (response.model_extra or {})["hermes"]
    assert hermes["exit_reason"] == "budget_exhausted"
    assert "monthly cost budget of this API key" in hermes["error"]

    async with http_client(server.base_url, KEY) as http:
        run = (await http.get(f"/v1/runs/{hermes['run_id']}")).json()
        assert (run["status"], run["exit_reason"]) == ("incomplete", "budget_exhausted")
        assert run["cost_usd"] == hermes["cost_usd"]
        totals: dict[str, Any] = {}

        async def ledger_has_it() -> bool:
            answered = await http.get("/v1/usage", params={"group_by": ""})
            totals.update(answered.json()["totals"])
            return bool(totals["calls"] == hermes["model_calls"])

        assert await until(ledger_has_it, server=server)
        assert totals["cost_usd"] == pytest.approx(run["cost_usd"])
        assert BUDGET_USD <= totals["cost_usd"] <= BUDGET_USD + 1  # one call over at most
        metrics = (await http.get("/metrics")).text
    counted = re.search(
        r'hermes_llm_cost_usd_total\{profile="hermes-agent",provider="sim"\} ([0-9.e+]+)', metrics
    )
    assert counted is not None
    assert float(counted.group(1)) == pytest.approx(totals["cost_usd"])
    ended = re.search(
        r'hermes_runs_finished_total\{endpoint="[a-z_]+",exit_reason="budget_exhausted"\} 1\.0',
        metrics,
    )
    assert ended is not None, [line for line in metrics.splitlines() if "runs_finished" in line]
