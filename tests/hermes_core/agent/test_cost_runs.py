"""What runs cost, and the caps on it: each call priced, the run's sum, the profile's
``max_cost_usd`` and a request's spend limit ending a run between model calls."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.events import CallRecord, ExitReason, SubagentEvent, TextDelta
from hermes_core.pricing import Price, PriceTable
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.usage import Usage
from tests.hermes_core.agent.conftest import finished, run_events, transcript_of

MODEL = "test-model-2026"
PRICES = PriceTable({"test-model": Price(input=1.0, output=4.0)})
"""USD per million tokens: the model is priced by its prefix."""
USAGE = Usage(input_tokens=500_000, output_tokens=125_000)
"""Costs 0.5 + 0.5 = 1 USD at PRICES."""
STEP = ScriptedReply(tool_calls=[("step", {})], usage=USAGE)
"""A reply that calls a tool: a run of only these loops until something stops it."""


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Do a small step.", parameters={"type": "object"})
    async def step(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "step done"

    return registry


def _agent(provider: ScriptedProvider, **config: Any) -> Agent:
    return Agent(provider, tools=_tools(), config=AgentConfig(prices=PRICES, **config))


async def test_each_call_is_priced_and_the_run_costs_their_sum() -> None:
    cheap = Usage(input_tokens=1000, output_tokens=100, cache_read_tokens=0)
    provider = ScriptedProvider(
        STEP, ScriptedReply(text="done", usage=cheap), model=MODEL, name="up"
    )
    end = finished(await run_events(_agent(provider), AgentRequest(user_message="work")))
    assert end.exit_reason is ExitReason.COMPLETED
    assert [c.cost_usd for c in end.calls] == [1.0, pytest.approx(0.0014)]
    assert end.calls[0] == CallRecord(provider="up", model=MODEL, usage=USAGE, cost_usd=1.0)
    assert end.cost_usd == pytest.approx(1.0014)


async def test_a_run_without_prices_counts_its_calls_at_no_cost() -> None:
    provider = ScriptedProvider(STEP, "done", model=MODEL)
    agent = Agent(provider, tools=_tools())
    end = finished(await run_events(agent, AgentRequest(user_message="work")))
    assert len(end.calls) == 2
    assert end.cost_usd == 0.0
    assert all(c.cost_usd == 0.0 for c in end.calls)


async def test_the_cost_cap_ends_a_looping_run_before_its_next_call_without_a_grace_call() -> None:
    provider = ScriptedProvider(*[STEP] * 20, model=MODEL)
    agent = _agent(provider, max_cost_usd=2.5)
    events = await run_events(agent, AgentRequest(user_message="loop"))
    end = finished(events)
    assert end.exit_reason is ExitReason.BUDGET_EXHAUSTED
    assert len(provider.requests) == 3  # 3 USD spent reaches the 2.5 cap: no fourth call
    assert all(request.tools for request in provider.requests)  # none was a grace call
    assert end.cost_usd == 3.0
    assert (
        end.error
        == "The run's cost cap (max_cost_usd 2.5 USD) is reached: it has spent 3.0000 USD."
    )
    assert transcript_of(events)[-2]["role"] == "tool"  # the last call's tools did run


async def test_a_run_stopped_by_its_cost_cap_with_nothing_to_say_ends_on_a_notice() -> None:
    provider = ScriptedProvider(
        ScriptedReply(text="Looking.", tool_calls=[("step", {})], usage=USAGE),
        *[STEP] * 20,
        model=MODEL,
    )
    events = await run_events(_agent(provider, max_cost_usd=1.5), AgentRequest(user_message="go"))

    end = finished(events)
    notice = (
        "The agent reached a spending limit before finishing. "
        "The run's cost cap (max_cost_usd 1.5 USD) is reached: it has spent 2.0000 USD."
    )
    assert (end.exit_reason, end.final_text, end.notice) == (
        ExitReason.BUDGET_EXHAUSTED, notice, True,
    )  # fmt: skip
    assert end.error is not None
    assert end.error in notice
    # Shown as any answer is, after the earlier step's text, and kept for the next turn.
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == f"Looking.\n\n{notice}"
    assert transcript_of(events)[-1] == {"role": "assistant", "content": notice}


async def test_a_spend_limit_ends_the_run_with_its_own_reason() -> None:
    class TokenLimit:
        def exceeded(self, calls: Sequence[CallRecord]) -> str | None:
            spent = sum(c.usage.input_tokens + c.usage.output_tokens for c in calls)
            return "The key's daily token budget is used up." if spent >= 1_000_000 else None

    provider = ScriptedProvider(*[STEP] * 20, model=MODEL)
    request = AgentRequest(user_message="loop", spend_limit=TokenLimit())
    end = finished(await run_events(_agent(provider), request))
    assert end.exit_reason is ExitReason.BUDGET_EXHAUSTED
    assert end.error == "The key's daily token budget is used up."
    assert len(provider.requests) == 2  # 625k tokens a call: the second one passes 1M


async def test_sub_agents_calls_are_their_runs_and_held_to_its_cost_cap() -> None:
    # The parent delegates (1 USD); the child loops on its tools; the parent's cap of 3.5
    # ends the child after its third call (1 + 3 >= 3.5), then the parent before its next.
    delegate = ScriptedReply(tool_calls=[("delegate_task", {"goal": "loop for ever"})], usage=USAGE)
    provider = ScriptedProvider(delegate, *[STEP] * 20, model=MODEL)
    agent = _agent(provider, max_cost_usd=3.5)
    events = await run_events(agent, AgentRequest(user_message="delegate"))
    end = finished(events)
    child_end = [
        e.event for e in events if isinstance(e, SubagentEvent) and e.event.kind == "run_finished"
    ]
    assert len(child_end) == 1
    assert child_end[0].exit_reason is ExitReason.BUDGET_EXHAUSTED
    assert len(provider.requests) == 4
    assert end.exit_reason is ExitReason.BUDGET_EXHAUSTED
    assert len(end.calls) == 4  # the parent's call and the child's three
    assert end.cost_usd == 4.0
    assert end.usage.input_tokens == 4 * USAGE.input_tokens
    # The parent's answer is its notice; before it, the delegation's report.
    report = json.loads(str(transcript_of(events)[-2]["content"]))
    assert report[0]["exit_reason"] == "budget_exhausted"


async def test_a_sub_agents_calls_count_for_the_run_when_it_is_stopped_mid_delegation() -> None:
    # The child has paid for one call when the run is interrupted during its second: what it
    # spent is the run's, though the delegation never finished.
    delegate = ScriptedReply(tool_calls=[("delegate_task", {"goal": "loop for ever"})], usage=USAGE)
    slow = ScriptedReply(text="never", usage=USAGE, delay_s=60)
    provider = ScriptedProvider(delegate, STEP, slow, model=MODEL)
    agent = _agent(provider)
    events = []
    async for event in agent.run(AgentRequest(user_message="delegate")):
        events.append(event)
        if isinstance(event, SubagentEvent) and event.event.kind == "step_finished":
            agent.interrupt("stop")
    end = finished(events)
    assert end.exit_reason is ExitReason.INTERRUPTED
    assert [call.usage for call in end.calls[:2]] == [USAGE, USAGE]  # the parent's, the child's
    assert end.cost_usd >= 2.0
