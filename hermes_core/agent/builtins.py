"""The agent-level tools a run offers besides the registry's: todo, memory, session_search,
delegate_task, clarify and the skill tools (skills_list, skill_view, skill_manage). What the
model is shown of them is fixed (:func:`builtin_templates`, the same objects every run); their
handlers close over the run's identity, stores, skills and budget, so a tool is bound to its
run (:func:`bind_builtin`) only when the model calls it.

This module does not import :class:`~hermes_core.agent.agent.Agent`: it sees the agent through
:class:`ToolOwner`, and a sub-agent is made by the agent's own ``spawn_child``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from hermes_core.agent.budget import IterationBudget
from hermes_core.agent.config import AgentConfig, AgentRequest, SpendLimit
from hermes_core.events import AgentEvent, CallRecord, RunFinished, SubagentEvent
from hermes_core.skills.shelf import SkillShelf
from hermes_core.stores import MemoryStore, SessionSearchStore, TodoStore
from hermes_core.tools.agent_tools import (
    AGENT_LEVEL_TOOLS,
    ALWAYS_ON_TOOLS,
    HOUSEKEEPING_TOOLS,
    SKILL_TOOLS,
    memory_tool,
    session_search_tool,
    todo_tool,
)
from hermes_core.tools.memory import MEMORY_TOOL
from hermes_core.tools.registry import Tool, ToolContext, unbound
from hermes_core.tools.session_search import SESSION_SEARCH_TOOL
from hermes_core.tools.skills import bind_skill_tool, skill_templates
from hermes_core.tools.todo import TODO_TOOL

__all__ = [
    "AGENT_LEVEL_TOOLS",
    "ALWAYS_ON_TOOLS",
    "HOUSEKEEPING_TOOLS",
    "bind_builtin",
    "builtin_templates",
]

ClarifyCallback = Callable[[str, list[str]], Awaitable[str] | str]


class SubAgent(Protocol):
    """What the delegate tool does with a child agent."""

    def run(self, request: AgentRequest) -> AsyncIterator[AgentEvent]: ...

    def interrupt(self, reason: str = ...) -> None: ...


class ToolOwner(Protocol):
    """What the agent-level tools need of the agent that offers them."""

    @property
    def owner(self) -> str: ...
    @property
    def memory_owner(self) -> str: ...
    @property
    def depth(self) -> int: ...
    @property
    def config(self) -> AgentConfig: ...
    @property
    def memory_store(self) -> MemoryStore: ...
    @property
    def todo_store(self) -> TodoStore: ...
    @property
    def session_search(self) -> SessionSearchStore | None: ...
    @property
    def clarify_callback(self) -> ClarifyCallback | None: ...
    @property
    def interrupt_reason(self) -> str | None: ...
    @property
    def interrupt_event(self) -> asyncio.Event: ...
    @property
    def skills(self) -> SkillShelf | None: ...
    @property
    def run_skills(self) -> SkillShelf | None:
        """The current run's shelf (the agent's, with the request's attached skills)."""
        ...

    def spawn_child(self, budget: IterationBudget) -> SubAgent:
        """A sub-agent drawing on ``budget``, interrupted together with this agent."""
        ...

    def child_spend_limit(self) -> SpendLimit | None:
        """What a sub-agent of the current run is held to (the run's caps and budgets)."""
        ...

    def count_child_calls(self, calls: Sequence[CallRecord]) -> None:
        """Add a finished sub-agent's model calls to the current run's."""
        ...


# Tools a sub-agent never gets: it cannot spawn further agents, ask the user, or edit memory
# or skills.
CHILD_EXCLUDED = ("delegate_task", "clarify", "memory", "skill_manage")
MAX_CHILD_SUMMARY_CHARS = 24_000

_DELEGATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "goal": {"type": "string", "description": "What the sub-agent must achieve."},
        "context": {
            "type": "string",
            "description": "Everything the sub-agent needs to know; it sees nothing else.",
        },
        "tasks": {
            "type": "array",
            "description": "Several independent tasks to run in parallel (at most 3). "
            "Use instead of goal/context.",
            "items": {
                "type": "object",
                "properties": {"goal": {"type": "string"}, "context": {"type": "string"}},
                "required": ["goal"],
            },
        },
    },
}
_CLARIFY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "description": "The question for the user."},
        "choices": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Optional answers to choose from.",
        },
    },
    "required": ["question"],
}


def builtin_templates(agent: ToolOwner) -> tuple[Tool, ...]:
    """The agent-level tools ``agent``'s runs offer, unbound: one tuple of the same objects
    for every agent alike, so what is made of it (the run's tools in order, their schemas) is
    made once (see ``ToolRegistry.overlaid``)."""
    top = agent.depth == 0
    skills = skill_templates(agent.skills) if agent.skills is not None else ()
    if not top:  # a sub-agent reads skills, it does not write them
        skills = tuple(t for t in skills if t.name not in CHILD_EXCLUDED)
    # The skill templates are module constants: their ids name them.
    key = (
        agent.session_search is not None,
        top,
        agent.clarify_callback is not None,
        tuple(map(id, skills)),
    )
    templates = _TEMPLATE_SETS.get(key)
    if templates is None:
        searches, top, asks, _ = key
        chosen = [TODO_TOOL]
        if searches:
            chosen.append(SESSION_SEARCH_TOOL)
        if top:  # a sub-agent cannot edit memory, delegate, or ask the user
            chosen += [MEMORY_TOOL, DELEGATE_TOOL]
            if asks:
                chosen.append(CLARIFY_TOOL)
        chosen += skills
        templates = _TEMPLATE_SETS[key] = tuple(chosen)
    return templates


_TEMPLATE_SETS: dict[tuple[bool, bool, bool, tuple[int, ...]], tuple[Tool, ...]] = {}


def bind_builtin(agent: ToolOwner, name: str, *, session_id: str, budget: IterationBudget) -> Tool:
    """The agent-level tool ``name`` (one of :func:`builtin_templates`) bound to a run."""
    if name == "todo":
        return todo_tool(agent.todo_store, session_id)
    if name == "session_search":
        assert agent.session_search is not None
        return session_search_tool(agent.session_search, agent.owner, session_id=session_id)
    if name == "memory":
        return memory_tool(
            agent.memory_store,
            agent.memory_owner,
            memory_limit=agent.config.memory_char_limit,
            user_limit=agent.config.user_profile_char_limit,
        )
    if name == "delegate_task":
        return _delegate_tool(agent, budget)
    if name == "clarify":
        return _clarify_tool(agent)
    if name in SKILL_TOOLS and agent.run_skills is not None:
        return bind_skill_tool(name, agent.run_skills)
    raise ValueError(f"{name!r} is not an agent-level tool")


def _delegate_tool(parent: ToolOwner, budget: IterationBudget) -> Tool:
    limit = parent.config.max_delegate_children

    async def delegate(arguments: dict[str, Any], ctx: ToolContext) -> str:
        tasks = arguments.get("tasks") or [
            {"goal": arguments.get("goal"), "context": arguments.get("context")}
        ]
        if not isinstance(tasks, list) or not all(
            isinstance(t, dict) and isinstance(t.get("goal"), str) and t["goal"].strip()
            for t in tasks
        ):
            return "Error: give a non-empty 'goal' (or 'tasks', each with a 'goal')."
        if len(tasks) > limit:
            return f"Error: at most {limit} tasks at once; you gave {len(tasks)}."
        children = [parent.spawn_child(budget) for _ in tasks]  # children share the pool

        async def run_child(index: int, child: SubAgent, task: dict[str, Any]) -> dict[str, Any]:
            prompt = task["goal"].strip()
            if isinstance(task.get("context"), str) and task["context"].strip():
                prompt += f"\n\nContext:\n{task['context'].strip()}"
            request = AgentRequest(
                user_message=prompt,
                task_id=f"{ctx.task_id}.sub{index}",
                workspace=ctx.workspace,
                spend_limit=parent.child_spend_limit(),
            )
            finished: RunFinished | None = None
            async for event in child.run(request):
                ctx.emit(SubagentEvent, call_id=ctx.call_id, child_index=index, event=event)
                if isinstance(event, RunFinished):
                    finished = event
            assert finished is not None
            parent.count_child_calls(finished.calls)  # the run paid for them
            share = MAX_CHILD_SUMMARY_CHARS // len(tasks)
            return {
                "goal": task["goal"],
                "exit_reason": finished.exit_reason.value,
                "final_response": finished.final_text[:share],
                "iterations": finished.iterations,
                **({"error": finished.error} if finished.error else {}),
            }

        results = await asyncio.gather(
            *(
                run_child(i, child, task)
                for i, (child, task) in enumerate(zip(children, tasks, strict=True))
            )
        )
        return json.dumps(results, ensure_ascii=False)

    return DELEGATE_TOOL.with_handler(delegate)


def _delegation_summary(arguments: dict[str, Any]) -> str:
    """``delegate_task "Count the owls"``, or ``delegate_task 2 tasks: "…", "…"``: the step
    line names what the sub-agents were asked, not only how many there are."""
    tasks = arguments.get("tasks")
    goals = [t.get("goal") for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []
    if not goals:
        goals = [arguments.get("goal")]
    quoted = ", ".join(f'"{_shorten(str(goal), 60)}"' for goal in goals if goal)
    if len(goals) == 1:
        return f"delegate_task {quoted}" if quoted else "delegate_task"
    return f"delegate_task {len(goals)} tasks: {quoted}"


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clarify_tool(agent: ToolOwner) -> Tool:
    async def clarify(arguments: dict[str, Any], ctx: ToolContext) -> str:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            return "Error: 'question' must be a non-empty string."
        choices = [str(c) for c in arguments.get("choices") or []]
        assert agent.clarify_callback is not None
        answer = agent.clarify_callback(question, choices)
        if inspect.isawaitable(answer):
            answer = await answer
        return str(answer)

    return CLARIFY_TOOL.with_handler(clarify)


DELEGATE_TOOL = Tool(
    name="delegate_task",
    description=(
        "Hand one task (goal + context) or up to 3 independent tasks to sub-agents that "
        "work in parallel with your tools, then report back. They share your iteration "
        "budget and see only what you put in the context."
    ),
    parameters=_DELEGATE_SCHEMA,
    handler=unbound,
    summarize=_delegation_summary,
)
CLARIFY_TOOL = Tool(
    name="clarify",
    description="Ask the user a question and wait for the answer. Use sparingly.",
    parameters=_CLARIFY_SCHEMA,
    handler=unbound,
    interactive=True,
    concurrent_safe=False,
    summarize=lambda args: f"clarify {str(args.get('question', ''))[:60]}",
)
