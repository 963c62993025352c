"""A turn of the agent loop against the simulator: answers, tool rounds, events, usage."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.events import (
    AgentEvent,
    MessageAdded,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    StepFinished,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolStarted,
)
from hermes_core.providers.base import ApiMode
from hermes_core.providers.retry import RetryPolicy
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.simulator import Reply, SimulatorServer, Step
from tests.hermes_core.agent.conftest import (
    ProviderFor,
    body_text,
    call,
    finished,
    run_events,
    script,
    sent,
)


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    )
    async def read_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"contents of {arguments['path']}: the answer is 42"

    @registry.tool(
        description="Sleep, then report.",
        parameters={"type": "object", "properties": {"seconds": {"type": "number"}}},
    )
    async def nap(arguments: dict[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(arguments["seconds"])
        return f"slept {arguments['seconds']}"

    return registry


async def test_a_plain_answer_completes_the_run(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(simulator, "plain", Step(reply=Reply(text="Hello!")))
    agent = Agent(provider_for(api_mode, "plain"))
    result = await agent.run_conversation("Hi")
    assert result["final_response"] == "Hello!"
    assert result["exit_reason"] == "completed"
    assert result["completed"] is True
    assert result["messages"] == [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]
    assert result["iterations"] == 1
    assert result["task_id"].startswith("task_")


async def test_tool_results_feed_the_next_model_call(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "tooling",
        Step(reply=Reply(tool_calls=[call("read_file", path="notes.txt")])),
        Step(reply=Reply(text="The answer is 42.")),
    )
    agent = Agent(provider_for(api_mode, "tooling"), tools=_tools())
    result = await agent.run_conversation("What is in notes.txt?")
    assert result["final_response"] == "The answer is 42."
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert result["messages"][2]["content"] == "contents of notes.txt: the answer is 42"
    first, second = sent(simulator, "tooling")
    assert "read_file" in body_text(first)
    assert "contents of notes.txt: the answer is 42" in body_text(second)


async def test_events_follow_the_contract(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "contract",
        Step(reply=Reply(reasoning="Look first.", tool_calls=[call("read_file", path="a")])),
        Step(reply=Reply(text="Done.")),
    )
    agent = Agent(provider_for(api_mode, "contract"), tools=_tools())
    events = await run_events(agent, AgentRequest(user_message="go", task_id="t-1"))
    assert [e.seq for e in events] == list(range(len(events)))
    assert len({e.run_id for e in events}) == 1
    assert isinstance(events[0], RunStarted)
    assert events[0].task_id == "t-1"
    assert [type(e) for e in events].count(RunFinished) == 1
    assert isinstance(events[-1], RunFinished)
    kinds = [e.kind for e in events]
    # The assistant's tool-call message is recorded before its tool starts.
    tool_call_saved = next(
        i for i, e in enumerate(events) if isinstance(e, MessageAdded) and "tool_calls" in e.message
    )
    assert tool_call_saved < kinds.index("tool_started") < kinds.index("tool_finished")
    assert any(isinstance(e, ReasoningDelta) for e in events)
    assert any(isinstance(e, ToolCallGenerating) and e.name == "read_file" for e in events)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Done."


async def test_execute_hands_over_the_same_events_as_run_each_as_it_happens(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    steps = [
        Step(reply=Reply(reasoning="Look first.", tool_calls=[call("read_file", path="a")])),
        Step(reply=Reply(text="Done.")),
    ]
    script(simulator, "execute", *steps)
    expected = await run_events(
        Agent(provider_for(api_mode, "execute"), tools=_tools()), AgentRequest(user_message="go")
    )
    script(simulator, "execute", *steps)
    delivered: list[tuple[AgentEvent, asyncio.Task[Any] | None]] = []
    agent = Agent(provider_for(api_mode, "execute"), tools=_tools())
    await agent.execute(
        AgentRequest(user_message="go"),
        lambda event: delivered.append((event, asyncio.current_task())),
    )
    events = [event for event, _ in delivered]
    assert [(e.kind, e.seq) for e in events] == [(e.kind, e.seq) for e in expected]
    assert isinstance(events[-1], RunFinished)
    assert events[-1].final_text == "Done."
    # Delivered from inside the loop (the caller's task, or the model call's), not a queue.
    assert all(task is not None for _, task in delivered)
    assert delivered[0][1] is asyncio.current_task()


async def test_parallel_slow_tools_take_about_as_long_as_the_slowest(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    naps = [call("nap", seconds=0.6) for _ in range(3)]
    script(simulator, "naps", Step(reply=Reply(tool_calls=naps)), Step(reply=Reply(text="ok")))
    agent = Agent(provider_for(api_mode, "naps"), tools=_tools())
    events: list[Any] = []
    async for event in agent.run(AgentRequest(user_message="nap thrice")):
        events.append(event)
    started = [e for e in events if isinstance(e, ToolStarted)]
    ended = [e for e in events if isinstance(e, ToolFinished)]
    assert len(started) == len(ended) == 3
    # Sequentially the naps would take 1.8 s; together they take about 0.6 s.
    assert max(e.duration_s for e in ended) < 1.2
    assert finished(events).exit_reason == "completed"


async def test_results_are_recorded_in_call_order_whatever_finishes_first(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    naps = [call("nap", seconds=0.3), call("nap", seconds=0.0), call("nap", seconds=0.1)]
    script(simulator, "order", Step(reply=Reply(tool_calls=naps)), Step(reply=Reply(text="ok")))
    agent = Agent(provider_for("chat_completions", "order"), tools=_tools())
    result = await agent.run_conversation("nap")
    results = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert results == ["slept 0.3", "slept 0.0", "slept 0.1"]
    calls = result["messages"][1]["tool_calls"]
    tool_ids = [m["tool_call_id"] for m in result["messages"] if m["role"] == "tool"]
    assert tool_ids == [c["id"] for c in calls]


async def test_reasoning_is_streamed_and_kept_in_the_transcript(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(simulator, "thinking", Step(reply=Reply(reasoning="Two plus two.", text="4")))
    agent = Agent(provider_for(api_mode, "thinking"))
    events = await run_events(agent, AgentRequest(user_message="2+2?"))
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Two plus two."
    answer = next(
        e.message
        for e in events
        if isinstance(e, MessageAdded) and e.message["role"] == "assistant"
    )
    assert answer["reasoning"] == "Two plus two."


async def test_usage_is_summed_over_every_model_call(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    script(
        simulator,
        "usage",
        Step(reply=Reply(tool_calls=[call("read_file", path="a")], reasoning="hm")),
        Step(reply=Reply(text="ok")),
    )
    agent = Agent(provider_for(api_mode, "usage"), tools=_tools())
    events = await run_events(agent, AgentRequest(user_message="go"))
    steps = [e for e in events if isinstance(e, StepFinished)]
    total = finished(events).usage
    assert len(steps) == 2
    assert total.input_tokens == sum(s.usage.input_tokens for s in steps) > 0
    assert total.output_tokens == sum(s.usage.output_tokens for s in steps) > 0
    assert total.reasoning_tokens > 0
    calls = finished(events).calls
    assert [(c.provider, c.model) for c in calls] == [("sim-" + api_mode, "usage")] * 2
    assert [c.usage for c in calls] == [s.usage for s in steps]


async def test_sync_tools_run_in_worker_threads_without_blocking_the_loop(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    registry = ToolRegistry()

    @registry.tool(description="Block for a while.", parameters={"type": "object"})
    def block(arguments: dict[str, Any], ctx: ToolContext) -> str:
        time.sleep(0.5)
        return "unblocked"

    script(
        simulator,
        "blocking",
        Step(reply=Reply(tool_calls=[call("block"), call("block")])),
        Step(reply=Reply(text="ok")),
    )
    agent = Agent(provider_for("chat_completions", "blocking"), tools=registry)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    result = await agent.run_conversation("block twice")
    elapsed = time.monotonic() - started
    ticking.cancel()
    assert result["exit_reason"] == "completed"
    assert elapsed < 0.95  # two 0.5 s blocks side by side
    assert ticks >= 5  # the event loop kept turning meanwhile


async def test_a_failing_upstream_fails_the_run_naming_the_failure(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    from server.simulator import Fault

    down = Fault(status=503, message="upstream is down")
    script(simulator, "broken", Step(fault=down, repeat=3))
    fast = RetryPolicy(base_delay=0.01)
    agent = Agent(provider_for(api_mode, "broken"), config=AgentConfig(retry=fast))
    result = await agent.run_conversation("hi")
    assert result["exit_reason"] == "failed"
    assert len(sent(simulator, "broken")) == 3  # retried twice before giving up
    assert "503" in result["error"]
    assert "upstream is down" in result["error"]
