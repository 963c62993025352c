"""A run on one replica stops for what runs on another spend while it goes on
(server/budgets/refresh.py, docs/budgets.md "Across replicas"): two real ``serve`` replicas on
one PostgreSQL and one Redis, a key with a monthly budget; replica A runs a long tool loop
well inside it, replica B a run that spends past it meanwhile. A re-reads the ledger every
``limits.budget_refresh_seconds`` and ends its run ``budget_exhausted`` within about that,
where it used to loop to its end."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.simulator import Fault, Reply, SimulatorServer, Step, ToolCallSpec
from tests.server.budget_replicas import Replica, postgres, two_replicas  # noqa: F401
from tests.server.served import script, sdk_client, simulated_provider, until

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

LOOPING = f"budgets-loop-{uuid.uuid4().hex[:8]}"
SPENDING = f"budgets-spend-{uuid.uuid4().hex[:8]}"
"""The upstream models of the two profiles (the simulator scripts by model)."""
KEY = f"sk-budget-refresh-{uuid.uuid4().hex}"
BUDGET_USD = 100
"""The key's monthly budget."""
REFRESH = 0.5
"""``limits.budget_refresh_seconds``: two of the looping run's calls."""
TODO = ToolCallSpec(name="todo", arguments={"todos": [{"id": "1", "content": "again"}]})
LOOP_CALLS = 60
LOOP = Step(
    reply=Reply(tool_calls=[TODO], output_tokens=1000),
    fault=Fault(first_byte_delay=REFRESH / 2),
    repeat=LOOP_CALLS,
)
"""1 USD a call, a quarter of a second each: 60 USD in all, well inside the budget alone."""
DONE = Step(reply=Reply(text="Done.", output_tokens=10))
SPEND = Step(reply=Reply(text="Spent.", output_tokens=BUDGET_USD * 1000))
"""One call of 100 USD: all of the budget."""


@pytest.fixture
def replicas(
    postgres: str,  # noqa: F811
    simulator: SimulatorServer,
    tmp_path: Path,
) -> Iterator[list[Replica]]:
    """Two replicas of one deployment."""
    config = f"""
server:
  api_keys:
    - {{principal: team, key: {KEY}, budget: {{cost_per_month_usd: {BUDGET_USD}}}}}
limits:
  budget_refresh_seconds: {REFRESH}
providers:
{simulated_provider(simulator, LOOPING, "looping")}
{simulated_provider(simulator, SPENDING, "spending")}
prices:
  {LOOPING}: {{input: 0, output: 1000}}
  {SPENDING}: {{input: 0, output: 1000}}
profiles:
  - {{id: looper, providers: [looping]}}
  - {{id: spender, providers: [spending]}}
"""
    with two_replicas(config, postgres, tmp_path) as started:
        yield started


async def _run(replica: Replica, profile: str) -> dict[str, Any]:
    async with sdk_client(replica.base_url, KEY) as client:
        completion = await client.chat.completions.create(
            model=profile, messages=[{"role": "user", "content": "go"}]
        )
    hermes: dict[str, Any] = (completion.model_extra or {})["hermes"]
    return hermes


async def test_a_run_stops_soon_after_a_run_on_another_replica_spends_what_was_left(
    replicas: list[Replica], simulator: SimulatorServer
) -> None:
    here, there = replicas
    script(simulator, LOOPING, LOOP, DONE)
    script(simulator, SPENDING, SPEND)
    looping = asyncio.create_task(_run(here, "looper"))
    assert await until(
        lambda: len(simulator.state.requests(scenario=LOOPING)) >= 3, server=here, seconds=60
    )

    spender = await _run(there, "spender")
    assert spender["exit_reason"] == "completed", spender  # admitted with 97 USD or so left
    looper = await asyncio.wait_for(looping, timeout=120)

    assert looper["exit_reason"] == "budget_exhausted", looper
    assert "used up what was left of the monthly cost budget of this API key" in looper["error"]
    spent_at = simulator.state.requests(scenario=SPENDING)[0].ended_at
    assert spent_at is not None
    after = [r for r in simulator.state.requests(scenario=LOOPING) if r.started_at > spent_at]
    # About one refresh interval: two calls, and the one the read came during; room is left
    # for a busy machine. Before replicas re-read the ledger, the loop made all its calls.
    assert len(after) <= 8, len(after)
    assert looper["model_calls"] < LOOP_CALLS
