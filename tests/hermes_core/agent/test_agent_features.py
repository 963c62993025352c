"""Agent-level tools, delegation, approvals, client tools and callbacks in real runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_core.agent import Agent, AgentCallbacks, AgentRequest
from hermes_core.errors import InvalidRequestError
from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    ClientToolCallsPending,
    ExitReason,
    InterruptSource,
    RunFinished,
    SubagentEvent,
    TextDelta,
    ToolStarted,
)
from hermes_core.memory_stores import InMemoryMemoryStore, InMemorySessionIndex, InMemoryTodoStore
from hermes_core.providers.base import ToolSchema
from hermes_core.tools.registry import ApprovalAsk, Tool, ToolContext, ToolRegistry
from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.hermes_core.agent.conftest import (
    ProviderFor,
    body_text,
    call,
    finished,
    run_events,
    script,
    sent,
    transcript_of,
)


def _system_prompt(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


async def test_memory_written_in_a_session_appears_only_in_the_next_session(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    store = InMemoryMemoryStore()
    note = call("memory", action="add", target="user", content="Prefers metric units.")
    script(
        simulator,
        "remember",
        Step(reply=Reply(tool_calls=[note])),
        Step(reply=Reply(text="Noted.")),
        Step(reply=Reply(text="Still this session.")),
        Step(reply=Reply(text="New session.")),
    )
    provider = provider_for("chat_completions", "remember")
    session = Agent(provider, memory_store=store, owner="alice")
    await session.run_conversation("Remember that I like metric units.")
    assert await store.load("alice", "user") == ["Prefers metric units."]
    await session.run_conversation("And now?")
    later_session = Agent(provider, memory_store=store, owner="alice")
    await later_session.run_conversation("Hello again")
    prompts = [_system_prompt(body) for body in sent(simulator, "remember")]
    assert "metric" not in prompts[2]  # frozen: the same session keeps its first snapshot
    assert prompts[0] == prompts[2]
    assert "Prefers metric units." in prompts[3]


async def test_a_full_memory_refuses_the_write_with_a_clear_result(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    store = InMemoryMemoryStore()
    await store.save("bob", "memory", ["x" * 2190])
    add = call("memory", action="add", target="memory", content="one more long note " * 3)
    script(simulator, "full", Step(reply=Reply(tool_calls=[add])), Step(reply=Reply(text="ok")))
    agent = Agent(provider_for("chat_completions", "full"), memory_store=store, owner="bob")
    result = await agent.run_conversation("note this")
    refusal = next(m["content"] for m in result["messages"] if m["role"] == "tool")
    assert "full" in refusal.lower()
    assert "/2200" in refusal
    assert await store.load("bob", "memory") == ["x" * 2190]


async def test_the_todo_tool_keeps_the_run_task_list(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    todos = InMemoryTodoStore()
    plan = {"todos": [{"id": "1", "content": "look", "status": "in_progress"}]}
    script(
        simulator,
        "plan",
        Step(reply=Reply(tool_calls=[call("todo", **plan)])),
        Step(reply=Reply(text="Planned.")),
    )
    agent = Agent(provider_for("chat_completions", "plan"), todo_store=todos)
    result = await agent.run_conversation("plan it", task_id="task-42")
    items = await todos.load("task-42")
    assert [(i.id, i.content, i.status) for i in items] == [("1", "look", "in_progress")]
    assert result["exit_reason"] == "completed"


async def test_session_search_finds_an_earlier_session_by_a_word_in_a_tool_result(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    index = InMemorySessionIndex()
    index.add_session(
        "carol",
        "s-old",
        "Deploy day",
        [
            {"role": "user", "content": "deploy please"},
            {"role": "tool", "tool_call_id": "c1", "content": "rolled out build zanzibar-7"},
        ],
    )
    script(
        simulator,
        "recall",
        Step(reply=Reply(tool_calls=[call("session_search", query="zanzibar")])),
        Step(reply=Reply(text="Found it.")),
    )
    agent = Agent(provider_for("chat_completions", "recall"), session_search=index, owner="carol")
    result = await agent.run_conversation("Which build did we deploy?")
    found = json.loads(next(m["content"] for m in result["messages"] if m["role"] == "tool"))
    assert found[0]["session_id"] == "s-old"


async def test_delegated_children_run_in_parallel_and_their_events_are_nested(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    tasks = [{"goal": "summarise A"}, {"goal": "summarise B", "context": "B is short"}]
    script(
        simulator,
        "delegate",
        Step(reply=Reply(tool_calls=[call("delegate_task", tasks=tasks)])),
        Step(reply=Reply(text="child done"), repeat=2),
        Step(reply=Reply(text="Both summaries are in.")),
    )
    agent = Agent(provider_for("chat_completions", "delegate"))
    events = await run_events(agent, AgentRequest(user_message="summarise A and B"))
    nested = [e for e in events if isinstance(e, SubagentEvent)]
    assert {e.child_index for e in nested} == {0, 1}
    step = next(e for e in events if isinstance(e, ToolStarted))
    assert step.summary == 'delegate_task 2 tasks: "summarise A", "summarise B"'
    child_ends = [e.event for e in nested if isinstance(e.event, RunFinished)]
    assert [e.exit_reason for e in child_ends] == [ExitReason.COMPLETED] * 2
    report = json.loads(
        str(next(m["content"] for m in transcript_of(events) if m["role"] == "tool"))
    )
    assert [r["final_response"] for r in report] == ["child done", "child done"]
    assert finished(events).final_text == "Both summaries are in."
    child_requests = sent(simulator, "delegate")[1:3]
    for body in child_requests:
        assert "delegate_task" not in body_text(body.get("tools", []))
        assert "memory" not in [t["function"]["name"] for t in body.get("tools", [])]


async def test_a_child_stops_with_its_parent_and_says_so(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    slow_child = Step(reply=Reply(text="word " * 40, chunk_count=40), fault=Fault(chunk_delay=0.25))
    script(
        simulator,
        "delegate-stop",
        Step(reply=Reply(tool_calls=[call("delegate_task", goal="talk slowly")])),
        slow_child,
    )
    agent = Agent(provider_for("chat_completions", "delegate-stop"))
    events: list[AgentEvent] = []
    async for event in agent.run(AgentRequest(user_message="delegate it")):
        events.append(event)
        if isinstance(event, SubagentEvent) and isinstance(event.event, TextDelta):
            agent.interrupt("stop pressed", source=InterruptSource.STOP_API)
    child_end = next(
        e.event for e in events if isinstance(e, SubagentEvent) and isinstance(e.event, RunFinished)
    )
    assert child_end.exit_reason is ExitReason.INTERRUPTED
    step = next(e for e in events if isinstance(e, ToolStarted))
    assert step.summary == 'delegate_task "talk slowly"'
    assert child_end.interrupt_source is InterruptSource.PARENT
    end = finished(events)
    assert (end.exit_reason, end.interrupt_source) == (
        ExitReason.INTERRUPTED,
        InterruptSource.STOP_API,
    )


def _dangerous_tools(log: list[str]) -> ToolRegistry:
    async def delete(arguments: dict[str, Any], ctx: ToolContext) -> str:
        log.append(arguments["path"])
        return f"deleted {arguments['path']}"

    return ToolRegistry(
        [
            Tool(
                name="delete_file",
                description="Delete a file.",
                parameters={"type": "object", "properties": {"path": {"type": "string"}}},
                handler=delete,
                needs_approval=lambda args: f"deletes {args.get('path')}",
            )
        ]
    )


async def test_a_dangerous_action_is_denied_when_no_one_can_approve_it(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    deleted: list[str] = []
    script(
        simulator,
        "danger",
        Step(reply=Reply(tool_calls=[call("delete_file", path="/etc/passwd")])),
        Step(reply=Reply(text="I could not delete it.")),
    )
    agent = Agent(provider_for("chat_completions", "danger"), tools=_dangerous_tools(deleted))
    events = await run_events(agent, AgentRequest(user_message="delete it"))
    assert deleted == []
    denial = next(m["content"] for m in transcript_of(events) if m["role"] == "tool")
    assert str(denial).startswith("Denied: delete_file needs approval (deletes /etc/passwd)")
    assert any(isinstance(e, ApprovalRequested) for e in events)
    assert [e.approved for e in events if isinstance(e, ApprovalResolved)] == [False]


async def test_an_approved_dangerous_action_runs(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    deleted: list[str] = []
    asked: list[tuple[str, str]] = []

    async def approve(ask: ApprovalAsk) -> bool:
        asked.append((ask.call.name, ask.reason))
        return True

    script(
        simulator,
        "approved",
        Step(reply=Reply(tool_calls=[call("delete_file", path="tmp.txt")])),
        Step(reply=Reply(text="Deleted.")),
    )
    agent = Agent(
        provider_for("chat_completions", "approved"),
        tools=_dangerous_tools(deleted),
        approval_callback=approve,
    )
    await agent.run_conversation("delete tmp.txt")
    assert deleted == ["tmp.txt"]
    assert asked == [("delete_file", "deletes tmp.txt")]


async def test_a_client_tool_call_ends_the_run_after_the_server_tools_ran(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    ran: list[str] = []
    registry = ToolRegistry()

    @registry.tool(description="Server-side lookup.", parameters={"type": "object"})
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        ran.append("lookup")
        return "looked up"

    script(
        simulator,
        "client",
        Step(reply=Reply(tool_calls=[call("lookup"), call("open_browser", url="https://x")])),
    )
    browser = ToolSchema(name="open_browser", parameters={"type": "object"})
    agent = Agent(provider_for("chat_completions", "client"), tools=registry)
    events = await run_events(
        agent, AgentRequest(user_message="look and browse", client_tools=[browser])
    )
    end = finished(events)
    assert end.exit_reason is ExitReason.AWAITING_CLIENT_TOOLS
    assert ran == ["lookup"]
    pending = next(e for e in events if isinstance(e, ClientToolCallsPending))
    assert [c["function"]["name"] for c in pending.tool_calls] == ["open_browser"]
    assert "open_browser" in body_text(sent(simulator, "client")[0]["tools"])


async def test_a_client_tool_named_like_a_server_tool_is_refused(
    provider_for: ProviderFor,
) -> None:
    agent = Agent(provider_for("chat_completions", "clash"))
    clash = ToolSchema(name="memory", parameters={"type": "object"})
    with pytest.raises(InvalidRequestError) as caught:
        await run_events(agent, AgentRequest(user_message="hi", client_tools=[clash]))
    assert caught.value.param == "tools"


async def test_callbacks_see_the_run_and_a_failing_one_does_not_break_it(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    seen: dict[str, list[Any]] = {"text": [], "tools": [], "status": [], "steps": []}

    def broken(*args: Any) -> None:
        raise RuntimeError("callback bug")

    callbacks = AgentCallbacks(
        stream_delta_callback=lambda text: seen["text"].append(text),
        tool_progress_callback=lambda phase, name, detail: seen["tools"].append((phase, name)),
        status_callback=lambda kind, message: seen["status"].append(kind),
        step_callback=lambda iteration, detail: seen["steps"].append(iteration),
        reasoning_callback=broken,
    )
    script(
        simulator,
        "callbacks",
        Step(reply=Reply(reasoning="hmm", tool_calls=[call("todo")])),
        Step(reply=Reply(text="All good.")),
    )
    agent = Agent(provider_for("chat_completions", "callbacks"), callbacks=callbacks)
    result = await agent.run_conversation("go")
    assert result["exit_reason"] == "completed"
    assert "".join(seen["text"]) == "All good."
    assert seen["tools"] == [("started", "todo"), ("finished", "todo")]
    assert seen["status"][0] == "started"
    assert seen["status"][-1] == "finished"
    assert seen["steps"] == [1, 2]


async def test_clarify_asks_the_callback_and_returns_the_answer(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    questions: list[tuple[str, list[str]]] = []

    async def answer(question: str, choices: list[str]) -> str:
        questions.append((question, choices))
        return "blue"

    ask = call("clarify", question="Which colour?", choices=["red", "blue"])
    script(simulator, "ask", Step(reply=Reply(tool_calls=[ask])), Step(reply=Reply(text="Blue.")))
    agent = Agent(provider_for("chat_completions", "ask"), clarify_callback=answer)
    result = await agent.run_conversation("paint it")
    assert questions == [("Which colour?", ["red", "blue"])]
    assert next(m["content"] for m in result["messages"] if m["role"] == "tool") == "blue"


async def test_chat_returns_the_final_answer(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "chatty", Step(reply=Reply(text="Hi there.")))
    agent = Agent(provider_for("chat_completions", "chatty"))
    assert await agent.chat("Hello") == "Hi there."


async def test_a_client_system_message_is_layered_over_the_agent_prompt(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    from hermes_core.agent import AgentConfig

    script(simulator, "layers", Step(reply=Reply(text="ok")))
    agent = Agent(
        provider_for("chat_completions", "layers"),
        config=AgentConfig(instructions="Profile: be terse."),
    )
    await agent.run_conversation("hi", system_message="Client: answer in French.")
    prompt = _system_prompt(sent(simulator, "layers")[0])
    assert prompt.index("You are Hermes") < prompt.index("Profile: be terse.")
    assert prompt.index("Profile: be terse.") < prompt.index("Client: answer in French.")
