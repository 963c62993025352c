"""The iteration budget in real runs: pressure notes, the grace call, the shared pool.

Loop logic runs on the in-process ScriptedProvider; the grace call, whose tool-less request
differs per wire, runs over each protocol against the simulator."""

from __future__ import annotations

import json
from typing import Any

from hermes_core.agent import Agent, AgentConfig, AgentRequest, IterationBudget
from hermes_core.events import (
    BudgetWarning,
    ExitReason,
    RunFinished,
    SubagentEvent,
    TextDelta,
    ToolStarted,
)
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.providers.base import ApiMode
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.simulator import Reply, SimulatorServer, Step
from tests.hermes_core.agent.conftest import (
    ProviderFor,
    body_text,
    call,
    finished,
    offered_tools,
    run_events,
    script,
    sent,
    transcript_of,
)


def _noop_tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Do a small step.", parameters={"type": "object"})
    async def step(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "step done"

    return registry


async def test_budget_pressure_reaches_the_model_but_not_the_transcript() -> None:
    provider = ScriptedProvider(*[ScriptedReply(tool_calls=[("step", {})])] * 9, "finished")
    agent = Agent(provider, tools=_noop_tools(), config=AgentConfig(max_iterations=10))
    events = await run_events(agent, AgentRequest(user_message="work"))
    bodies = [str(request.messages) for request in provider.requests]
    assert not any("[BUDGET" in body for body in bodies[:6])
    assert (
        "[BUDGET: Iteration 7/10. 3 iterations left. Start consolidating your work.]" in (bodies[6])
    )
    assert (
        "[BUDGET WARNING: Iteration 9/10. Only 1 iteration left. "
        "Provide your final response NOW.]" in bodies[8]
    )
    warnings = [(e.tier, e.used) for e in events if isinstance(e, BudgetWarning)]
    assert warnings == [("caution", 7), ("warning", 9)]
    end = finished(events)
    assert end.exit_reason is ExitReason.COMPLETED
    assert not any("[BUDGET" in str(m.get("content")) for m in transcript_of(events))


async def test_an_exhausted_budget_makes_one_grace_call_without_tools(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "grace",
        Step(reply=Reply(tool_calls=[call("step")]), repeat=3),
        Step(reply=Reply(text="I did three steps; nothing is left.")),
    )
    agent = Agent(
        provider_for(api_mode, "grace"), tools=_noop_tools(), config=AgentConfig(max_iterations=3)
    )
    result = await agent.run_conversation("work")
    assert result["exit_reason"] == "budget_exhausted"
    assert result["completed"] is False
    assert result["final_response"] == "I did three steps; nothing is left."
    assert result["iterations"] == 3
    assert result["model_calls"] == 4
    requests = sent(simulator, "grace")
    assert len(requests) == 4
    assert "step" in offered_tools(requests[2])
    assert offered_tools(requests[3]) == []
    assert "budget" in body_text(requests[3])


async def test_a_grace_reply_calling_a_tool_ends_on_a_notice_naming_the_tool() -> None:
    provider = ScriptedProvider(
        ScriptedReply(text="Stepping.", tool_calls=[("step", {})]),
        ScriptedReply(tool_calls=[("step", {})]),
        # Models do call tools when offered none: the grace reply asks for two more.
        ScriptedReply(tool_calls=[("step", {}), ("shell", {"command": "ls"})]),
    )
    agent = Agent(provider, tools=_noop_tools(), config=AgentConfig(max_iterations=2))
    events = await run_events(agent, AgentRequest(user_message="work"))

    end = finished(events)
    assert end.exit_reason is ExitReason.BUDGET_EXHAUSTED
    notice = (
        "The agent reached its step budget before finishing; "
        "it still wanted to call `step` and `shell`."
    )
    assert end.final_text == notice
    assert end.notice  # the agent's words, not the model's (metrics count no answer)
    # Shown as any answer is (a stream's client sees it), after the earlier step's text.
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == f"Stepping.\n\n{notice}"
    assert len([e for e in events if isinstance(e, ToolStarted)]) == 2  # none of the grace's
    assert provider.requests[-1].tools == ()
    assert transcript_of(events)[-1] == {"role": "assistant", "content": notice}


async def test_a_grace_reply_with_text_and_a_tool_call_answers_with_its_text() -> None:
    provider = ScriptedProvider(
        ScriptedReply(tool_calls=[("step", {})]),
        ScriptedReply(text="One step done; one left.", tool_calls=[("step", {})]),
    )
    agent = Agent(provider, tools=_noop_tools(), config=AgentConfig(max_iterations=1))
    events = await run_events(agent, AgentRequest(user_message="work"))

    end = finished(events)
    assert end.exit_reason is ExitReason.BUDGET_EXHAUSTED
    assert end.final_text == "One step done; one left."
    assert not end.notice
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == end.final_text
    assert len([e for e in events if isinstance(e, ToolStarted)]) == 1


async def test_no_grace_call_when_the_model_has_nothing_to_report() -> None:
    budget = IterationBudget(2)
    assert budget.consume()
    assert budget.consume()
    provider = ScriptedProvider()
    agent = Agent(provider, budget=budget)
    result = await agent.run_conversation("anything left?")
    assert result["exit_reason"] == "budget_exhausted"
    assert result["model_calls"] == 0
    assert provider.requests == []


async def test_the_shared_budget_stops_a_parent_whose_children_used_it_up() -> None:
    tasks = [{"goal": "step forever"}, {"goal": "step forever too"}]
    provider = ScriptedProvider(
        ScriptedReply(tool_calls=[("delegate_task", {"tasks": tasks})]),
        # Every later call (children, and the grace calls) asks for another step.
        *[ScriptedReply(tool_calls=[("step", {})])] * 100,
    )
    budget = IterationBudget(8)
    agent = Agent(
        provider, tools=_noop_tools(), budget=budget, config=AgentConfig(max_iterations=8)
    )
    events = await run_events(agent, AgentRequest(user_message="delegate"))
    end = finished(events)
    assert end.exit_reason is ExitReason.BUDGET_EXHAUSTED
    assert end.iterations == 1  # the parent itself made one budgeted call
    assert budget.used == budget.max_total == 8
    child_ends = [
        e.event for e in events if isinstance(e, SubagentEvent) and isinstance(e.event, RunFinished)
    ]
    assert len(child_ends) == 2
    assert {e.exit_reason for e in child_ends} == {ExitReason.BUDGET_EXHAUSTED}
    assert sum(e.iterations for e in child_ends) == 7
    delegate_result = next(m for m in transcript_of(events) if m["role"] == "tool")
    reports = json.loads(str(delegate_result["content"]))
    assert [r["exit_reason"] for r in reports] == ["budget_exhausted"] * 2
