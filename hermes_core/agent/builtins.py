"""The agent-level tools a run offers besides the registry's: todo, memory, session_search,
delegate_task and clarify. They are built per run because they close over the run's identity,
stores and budget.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from typing import TYPE_CHECKING, Any

from hermes_core.agent.budget import IterationBudget
from hermes_core.agent.config import AgentRequest
from hermes_core.events import RunFinished, SubagentEvent
from hermes_core.memory_stores import InMemoryTodoStore
from hermes_core.tools.agent_tools import memory_tool, session_search_tool, todo_tool
from hermes_core.tools.registry import Tool, ToolContext

if TYPE_CHECKING:
    from hermes_core.agent.agent import Agent

# Tools a sub-agent never gets: it cannot spawn further agents, ask the user, or edit memory.
CHILD_EXCLUDED = ("delegate_task", "clarify", "memory")
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


def agent_level_tools(
    agent: Agent, *, task_id: str, session_id: str, budget: IterationBudget
) -> list[Tool]:
    tools = [
        todo_tool(agent.todo_store, session_id),
        session_search_tool(agent.session_search, agent.owner, session_id=session_id),
    ]
    if agent.depth == 0:
        tools.append(
            memory_tool(
                agent.memory_store,
                agent.memory_owner,
                memory_limit=agent.config.memory_char_limit,
                user_limit=agent.config.user_profile_char_limit,
            )
        )
        tools.append(_delegate_tool(agent, budget))
        if agent.clarify_callback is not None:
            tools.append(_clarify_tool(agent))
    return tools


def _delegate_tool(parent: Agent, budget: IterationBudget) -> Tool:
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
        from hermes_core.agent.agent import Agent

        children = [
            Agent(
                parent.provider,
                tools=parent.tools.without(*CHILD_EXCLUDED),
                config=dataclasses.replace(parent.config, instructions=""),
                owner=parent.owner,
                todo_store=InMemoryTodoStore(),
                session_search=parent.session_search,
                approval_callback=parent.approval_callback,
                context=parent.context,
                budget=budget,  # children draw from the parent's pool
                depth=parent.depth + 1,
            )
            for _ in tasks
        ]
        parent.children.extend(children)
        if parent.interrupt_event.is_set():
            for child in children:
                child.interrupt(parent.interrupt_reason or "parent interrupted")

        async def run_child(index: int, child: Agent, task: dict[str, Any]) -> dict[str, Any]:
            prompt = task["goal"].strip()
            if isinstance(task.get("context"), str) and task["context"].strip():
                prompt += f"\n\nContext:\n{task['context'].strip()}"
            request = AgentRequest(user_message=prompt, task_id=f"{ctx.task_id}.sub{index}")
            finished: RunFinished | None = None
            async for event in child.run(request):
                ctx.emit(SubagentEvent, call_id=ctx.call_id, child_index=index, event=event)
                if isinstance(event, RunFinished):
                    finished = event
            assert finished is not None
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

    return Tool(
        name="delegate_task",
        description=(
            "Hand one task (goal + context) or up to 3 independent tasks to sub-agents that "
            "work in parallel with your tools, then report back. They share your iteration "
            "budget and see only what you put in the context."
        ),
        parameters=_DELEGATE_SCHEMA,
        handler=delegate,
        summarize=lambda args: f"delegate_task {len(args.get('tasks') or [1])} task(s)",
    )


def _clarify_tool(agent: Agent) -> Tool:
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

    return Tool(
        name="clarify",
        description="Ask the user a question and wait for the answer. Use sparingly.",
        parameters=_CLARIFY_SCHEMA,
        handler=clarify,
        interactive=True,
        concurrent_safe=False,
        summarize=lambda args: f"clarify {str(args.get('question', ''))[:60]}",
    )
