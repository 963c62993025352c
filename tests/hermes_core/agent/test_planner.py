"""The planner in real runs (in process, ScriptedProvider): a plan before the first action,
recorded as the session's todo list and the model's own ``todo`` call, and a new plan when too
many of the tool calls since the last one failed."""

from __future__ import annotations

import json
from typing import Any

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.agent.planner import MAX_REPLANS, MAX_STEPS, parse_plan
from hermes_core.events import ExitReason, PlanMade, ToolStarted
from hermes_core.memory_stores import InMemoryTodoStore
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.providers.base import ModelRequest
from hermes_core.stores import TodoItem
from hermes_core.tools.registry import ToolContext, ToolRegistry
from tests.hermes_core.agent.conftest import finished, run_events, transcript_of

PLAN = "1. Read the notes\n2. Check the numbers\n3. Write the summary"
STEPS = ["Read the notes", "Check the numbers", "Write the summary"]


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    )
    async def read(arguments: dict[str, Any], ctx: ToolContext) -> str:
        if arguments["path"].startswith("missing"):
            raise FileNotFoundError(arguments["path"])
        if arguments["path"].startswith("outside"):
            return "Error: that path is outside the workspace."
        return f"contents of {arguments['path']}"

    return registry


def _agent(*steps: Any, **config: Any) -> tuple[Agent, ScriptedProvider, InMemoryTodoStore]:
    provider = ScriptedProvider(*steps)
    todos = InMemoryTodoStore()
    agent = Agent(
        provider,
        tools=_tools(),
        todo_store=todos,
        config=AgentConfig(planner=config.pop("planner", True), **config),
    )
    return agent, provider, todos


def _reads(*paths: str) -> ScriptedReply:
    return ScriptedReply(tool_calls=[("read", {"path": path}) for path in paths])


def _planning(request: ModelRequest) -> bool:
    return not request.tools and "NO PLAN" in json.dumps(request.messages)


async def test_a_planned_run_says_its_plan_before_its_first_tool() -> None:
    agent, provider, _ = _agent(PLAN, _reads("notes.txt"), "Done.")
    events = await run_events(agent, AgentRequest(user_message="summarise", session_id="s1"))
    plans = [e for e in events if isinstance(e, PlanMade)]
    assert [(p.steps, p.replanned, p.reason) for p in plans] == [(STEPS, False, None)]
    first_tool = next(e for e in events if isinstance(e, ToolStarted))
    assert plans[0].seq < first_tool.seq
    assert _planning(provider.requests[0])
    assert provider.requests[1].tools  # the first step acts, with tools
    end = finished(events)
    assert end.exit_reason is ExitReason.COMPLETED
    assert end.final_text == "Done."  # the plan's text is no part of the answer
    assert end.model_calls == 3


async def test_the_plan_is_the_sessions_todo_list_and_the_models_own_todo_call() -> None:
    agent, provider, todos = _agent(PLAN, _reads("notes.txt"), "Done.")
    events = await run_events(agent, AgentRequest(user_message="summarise", session_id="s1"))
    expected = [TodoItem(id=str(n), content=step) for n, step in enumerate(STEPS, start=1)]
    assert await todos.load("s1") == expected
    transcript = transcript_of(events)
    assert [m["role"] for m in transcript[:3]] == ["user", "assistant", "tool"]
    [call] = transcript[1]["tool_calls"]
    assert call["function"]["name"] == "todo"
    written = json.loads(call["function"]["arguments"])["todos"]
    assert [item["content"] for item in written] == STEPS
    assert transcript[2]["tool_call_id"] == call["id"]
    assert json.loads(str(transcript[2]["content"]))["total"] == 3
    # The acting call sees the plan as its own call and result; not the planner's request.
    acting = json.dumps(provider.requests[1].messages)
    assert "Check the numbers" in acting
    assert "NO PLAN" not in acting


async def test_no_plan_means_no_plan_event_and_no_todo_call() -> None:
    agent, provider, _ = _agent("NO PLAN", "Paris.")
    events = await run_events(agent, AgentRequest(user_message="capital of France?"))
    assert not [e for e in events if isinstance(e, PlanMade)]
    assert [m["role"] for m in transcript_of(events)] == ["user", "assistant"]
    assert finished(events).final_text == "Paris."
    assert len(provider.requests) == 2


async def test_two_of_three_failed_tool_calls_make_the_agent_replan() -> None:
    agent, provider, todos = _agent(
        PLAN,
        _reads("missing-1", "missing-2", "notes.txt"),
        "1. Look for the notes elsewhere\n2. Write the summary",
        "Done.",
    )
    events = await run_events(agent, AgentRequest(user_message="summarise", session_id="s1"))
    plans = [e for e in events if isinstance(e, PlanMade)]
    assert [(p.replanned, p.reason) for p in plans] == [
        (False, None),
        (True, "2 of 3 tool calls since the plan failed"),
    ]
    assert plans[1].steps == ["Look for the notes elsewhere", "Write the summary"]
    replanning = provider.requests[2]
    assert not replanning.tools
    assert "2 of the 3 tool calls since your plan failed" in json.dumps(replanning.messages)
    assert [i.content for i in await todos.load("s1")] == plans[1].steps
    assert finished(events).exit_reason is ExitReason.COMPLETED


async def test_tool_answers_that_say_error_count_as_failed_calls() -> None:
    agent, _, _ = _agent(
        PLAN, _reads("outside-1", "outside-2", "notes.txt"), "1. Stay inside\n2. Answer", "Done."
    )
    events = await run_events(agent, AgentRequest(user_message="summarise"))
    assert [e.replanned for e in events if isinstance(e, PlanMade)] == [False, True]


async def test_failures_under_thirty_percent_make_no_replan() -> None:
    agent, provider, _ = _agent(
        PLAN, _reads("missing-1", "a", "b", "c"), _reads("d", "e", "f"), "Done."
    )
    events = await run_events(agent, AgentRequest(user_message="summarise"))
    assert [e.replanned for e in events if isinstance(e, PlanMade)] == [False]
    assert len(provider.requests) == 4


async def test_a_run_replans_at_most_three_times() -> None:
    failing = _reads("missing-1", "missing-2", "missing-3")
    steps: list[Any] = [PLAN]
    for _ in range(MAX_REPLANS + 2):
        steps += [failing, "1. Try again\n2. Then answer"]
    agent, provider, _ = _agent(*steps[: 2 + 2 * MAX_REPLANS], failing, failing, "Gave up.")
    events = await run_events(agent, AgentRequest(user_message="summarise"))
    replans = [e for e in events if isinstance(e, PlanMade) and e.replanned]
    assert len(replans) == MAX_REPLANS
    assert finished(events).final_text == "Gave up."
    assert sum(_planning(r) for r in provider.requests) == 1 + MAX_REPLANS


async def test_a_run_that_carries_on_from_client_tool_results_makes_no_plan() -> None:
    agent, provider, _ = _agent("It is sunny.")
    history: list[Any] = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    events = await run_events(agent, AgentRequest(history=history))
    assert not [e for e in events if isinstance(e, PlanMade)]
    assert len(provider.requests) == 1


async def test_a_message_passed_as_the_historys_last_is_planned_for() -> None:
    agent, provider, _ = _agent(PLAN, "Done.")
    history: list[Any] = [{"role": "user", "content": "summarise"}]
    events = await run_events(agent, AgentRequest(history=history))
    assert [e.steps for e in events if isinstance(e, PlanMade)] == [STEPS]
    assert _planning(provider.requests[0])


async def test_without_the_planner_no_planning_call_is_made() -> None:
    agent, provider, _ = _agent(_reads("missing-1", "missing-2", "x"), "Done.", planner=False)
    events = await run_events(agent, AgentRequest(user_message="summarise"))
    assert not [e for e in events if isinstance(e, PlanMade)]
    assert len(provider.requests) == 2
    assert all(request.tools for request in provider.requests)


async def test_a_budget_too_small_for_a_plan_and_a_step_skips_the_plan() -> None:
    agent, provider, _ = _agent("Paris.", max_iterations=1)
    events = await run_events(agent, AgentRequest(user_message="capital of France?"))
    assert finished(events).final_text == "Paris."
    assert len(provider.requests) == 1
    assert provider.requests[0].tools


async def test_the_first_step_after_the_plan_keeps_the_clients_tool_choice() -> None:
    agent, provider, _ = _agent(PLAN, _reads("notes.txt"), "Done.")
    await run_events(agent, AgentRequest(user_message="summarise", tool_choice="required"))
    assert provider.requests[0].tool_choice == "auto"
    assert provider.requests[1].tool_choice == "required"


def test_plans_are_read_from_numbered_and_bulleted_lists() -> None:
    reply = "Here is my plan:\n\n1) **Read** it\n   - a detail\n2. Check\n- Third\nStep 4: Done"
    assert parse_plan(reply) == ["Read it", "Check", "Third", "Done"]
    assert parse_plan("NO PLAN") == parse_plan("No plan.") == []
    assert parse_plan("I will just answer this directly.") == []
    many = "\n".join(f"{n}. step {n} " + "x" * 300 for n in range(1, 20))
    parsed = parse_plan(many)
    assert len(parsed) == MAX_STEPS
    assert all(len(step) <= 200 and step.endswith("…") for step in parsed)


async def test_a_sub_agent_does_not_plan_its_delegated_task() -> None:
    delegate = ScriptedReply(tool_calls=[("delegate_task", {"goal": "read the notes"})])
    agent, provider, _ = _agent(PLAN, delegate, _reads("notes.txt"), "Read.", "Done.")

    events = await run_events(agent, AgentRequest(user_message="summarise", session_id="s1"))

    assert finished(events).final_text == "Done."
    assert [_planning(request) for request in provider.requests] == [
        True,  # the parent's plan
        False,  # the parent delegates
        False,  # the child acts at once: no plan of its own
        False,
        False,
    ]
