"""Budgets against real ``serve`` processes: two replicas on one PostgreSQL and one Redis hold
a key to one daily token budget, and a profile's ``max_cost_usd`` ends a looping run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.budget_replicas import postgres, two_replicas  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

UPSTREAM = f"budgets-{uuid.uuid4().hex[:8]}"
"""The upstream model: new per test session (the simulator scripts by model)."""
KEY_TEAM = f"sk-budget-team-{uuid.uuid4().hex}"
"""500 tokens a day: one run uses it up."""
KEY_OTHER = f"sk-budget-other-{uuid.uuid4().hex}"
"""No budget."""
KEY_DESK = f"sk-budget-desk-{uuid.uuid4().hex}"
"""A trusted front end: no budget of its own, 500 tokens a day for each of its end users."""
ANSWER = Step(reply=Reply(text="Done.", output_tokens=1000))
"""A one-call run: 1000 output tokens (1 USD) and its prompt's."""
TODO = ToolCallSpec(name="todo", arguments={"todos": [{"id": "1", "content": "again"}]})
LOOP = Step(reply=Reply(tool_calls=[TODO], output_tokens=1000), repeat=20)
"""A run that calls a tool for ever, 1 USD a call."""


@pytest.fixture
def replicas(
    postgres: str,  # noqa: F811
    simulator: SimulatorServer,
    tmp_path: Path,
) -> Iterator[list[str]]:
    """The base URLs of two replicas of one deployment."""
    config = f"""
server:
  api_keys:
    - {{principal: team, key: {KEY_TEAM}, budget: {{tokens_per_day: 500}}}}
    - {{principal: other, key: {KEY_OTHER}}}
    - {{principal: desk, key: {KEY_DESK}, trusted_front_end: true,
        end_user_budget: {{tokens_per_day: 500}}}}
providers:
  - name: sim
    model: {UPSTREAM}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
prices:
  {UPSTREAM}: {{input: 0, output: 1000}}
profiles:
  - {{id: hermes-agent, providers: [sim], max_cost_usd: 2.5}}
"""
    with two_replicas(config, postgres, tmp_path) as started:
        yield [replica.base_url for replica in started]


async def _chat(
    base_url: str, key: str, content: str, end_user: str | None = None
) -> httpx.Response:
    named = {"x-openwebui-user-id": end_user} if end_user else {}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=base_url, timeout=60) as http:
        return await http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}", **named},
            json={"model": "hermes-agent", "messages": [{"role": "user", "content": content}]},
        )


async def test_a_keys_daily_budget_holds_across_replicas_and_the_cost_cap_ends_a_loop(
    replicas: list[str], simulator: SimulatorServer
) -> None:
    first, second = replicas
    simulator.state.script(UPSTREAM, Scenario(steps=[ANSWER, ANSWER, ANSWER, LOOP]))

    used = await _chat(first, KEY_TEAM, "hello")
    assert used.status_code == 200, used.text  # its 1000+ tokens use up the day's 500
    refused = await _chat(second, KEY_TEAM, "hello again")
    assert refused.status_code == 429, refused.text
    error: dict[str, Any] = refused.json()["error"]
    assert (error["code"], error["type"]) == ("quota_exceeded", "insufficient_quota")
    assert error["message"].startswith(
        "The daily token budget of this API key (500 tokens per UTC day) is used up"
    )
    assert "resets at " in error["message"]
    assert 0 < int(refused.headers["retry-after"]) <= 86_400

    # An end user's budget holds them alone: Ann is refused on the other replica, Ben is not.
    assert (await _chat(first, KEY_DESK, "hi", end_user="ann")).status_code == 200
    ann = await _chat(second, KEY_DESK, "hi again", end_user="ann")
    assert ann.status_code == 429, ann.text
    assert ann.json()["error"]["code"] == "quota_exceeded"
    assert "end user" in ann.json()["error"]["message"]
    assert (await _chat(second, KEY_DESK, "hi", end_user="ben")).status_code == 200

    looped = await _chat(second, KEY_OTHER, "loop")  # another key: no budget, but the cap
    assert looped.status_code == 200, looped.text
    hermes = looped.json()["hermes"]
    assert hermes["exit_reason"] == "budget_exhausted"
    assert hermes["model_calls"] == 3  # 3 USD reached the 2.5 cap: no fourth call
    assert "max_cost_usd 2.5 USD" in hermes["error"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=first, timeout=30) as http:
        run = await http.get(
            f"/v1/runs/{hermes['run_id']}", headers={"authorization": f"Bearer {KEY_OTHER}"}
        )
    assert run.status_code == 200, run.text
    assert run.json()["exit_reason"] == "budget_exhausted"
    assert run.json()["cost_usd"] == 3.0
