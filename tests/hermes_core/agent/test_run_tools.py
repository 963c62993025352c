"""A run's tools: what the model is shown is made once; a called tool acts for its own run."""

from __future__ import annotations

from typing import Any

from hermes_core.agent import Agent
from hermes_core.memory_stores import InMemoryTodoStore
from hermes_core.providers import ScriptedProvider, ScriptedReply
from hermes_core.tools.registry import ToolContext, ToolRegistry


def _profile_tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Look.", parameters={"type": "object"})
    async def look(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "seen"

    return registry


async def test_runs_of_agents_alike_are_offered_one_tuple_of_schemas() -> None:
    tools = _profile_tools()
    first, second = ScriptedProvider("One."), ScriptedProvider("Two.")

    await Agent(first, tools=tools).run_conversation("hi")
    await Agent(second, tools=tools).run_conversation("hi")

    offered = first.requests[0].tools
    assert [t.name for t in offered] == ["delegate_task", "look", "memory", "todo"]
    assert second.requests[0].tools is offered  # a provider may keep what it makes of it


async def test_an_agent_level_tool_acts_for_the_session_of_its_own_run() -> None:
    todos = InMemoryTodoStore()

    async def plan(session: str, item: str) -> None:
        write = {"todos": [{"id": "1", "content": item}]}
        provider = ScriptedProvider(ScriptedReply(tool_calls=[("todo", write)]), "Planned.")
        agent = Agent(provider, tools=_profile_tools(), todo_store=todos)
        await agent.run_conversation("plan", task_id=session)

    await plan("a", "first")
    await plan("b", "second")

    assert [i.content for i in await todos.load("a")] == ["first"]
    assert [i.content for i in await todos.load("b")] == ["second"]
