"""Two runs of one key at once on a real ``serve`` process share what was left of its budget
(docs/budgets.md): each loops on a tool, 1 USD a model call, and both stop when their
combined spend reaches the key's monthly budget, not each when its own does."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.simulator import Fault, Reply, SimulatorServer, Step, ToolCallSpec
from tests.server.budgeted import budgeted_config
from tests.server.served import Served, http_client, script, sdk_client, serving, until

pytestmark = pytest.mark.slow

UPSTREAM = f"budgets-at-once-{uuid.uuid4().hex[:8]}"
KEY = f"sk-budget-at-once-{uuid.uuid4().hex}"
BUDGET_USD = 6
"""The key's monthly budget: a run alone makes 6 calls of 1 USD, then stops."""
TODO = ToolCallSpec(name="todo", arguments={"todos": [{"id": "1", "content": "again"}]})
LOOP = Step(
    reply=Reply(tool_calls=[TODO], output_tokens=1000),
    # Each call takes a moment, so that the two runs' calls interleave.
    fault=Fault(first_byte_delay=0.2),
    repeat=40,
)
"""A run that calls a tool for ever: 1000 output tokens, 1 USD, a call."""


@pytest.fixture
def server(simulator: SimulatorServer, tmp_path: Path) -> Iterator[Served]:
    config = budgeted_config(simulator.base_url, UPSTREAM, KEY, BUDGET_USD)
    with serving(tmp_path, config) as served:
        yield served


async def _loop(server: Served, content: str) -> dict[str, Any]:
    async with sdk_client(server.base_url, KEY) as client:
        completion = await client.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": content}]
        )
    hermes: dict[str, Any] = (completion.model_extra or {})["hermes"]
    return hermes


async def test_two_runs_of_one_key_at_once_stop_when_their_combined_spend_reaches_its_budget(
    server: Served, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, LOOP)

    first, second = await asyncio.gather(_loop(server, "loop"), _loop(server, "loop too"))

    for run in (first, second):
        assert run["exit_reason"] == "budget_exhausted", run
        assert run["model_calls"] < BUDGET_USD  # alone, it would have made 6
        assert "used up what was left of the monthly cost budget of this API key" in run["error"]
    assert "others beside it" in first["error"] + second["error"]

    totals: dict[str, Any] = {}

    async def ledger_has_both() -> bool:
        async with http_client(server.base_url, KEY) as http:
            answer = await http.get("/v1/usage", params={"group_by": ""})
        assert answer.status_code == 200, answer.text
        totals.update(answer.json()["totals"])
        return bool(totals["calls"] == first["model_calls"] + second["model_calls"])

    assert await until(ledger_has_both, server=server)
    assert BUDGET_USD <= totals["cost_usd"] <= BUDGET_USD + 2  # at most one call over per run
