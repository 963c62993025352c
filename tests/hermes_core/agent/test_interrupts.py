"""Interrupts: an abandoned model call, tools that finish or are cancelled, honest endings."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent, ExitReason, InterruptSource, TextDelta, ToolFinished
from hermes_core.providers.base import ApiMode
from hermes_core.tools.executor import CANCELLED_BEFORE_START, CANCELLED_WHILE_RUNNING
from hermes_core.tools.registry import Tool, ToolContext, ToolRegistry
from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.hermes_core.agent.conftest import (
    ProviderFor,
    call,
    finished,
    run_events,
    script,
    transcript_of,
)


def _slow_stream(simulator: SimulatorServer, model: str) -> None:
    # 40 deltas 0.25 s apart: about 10 s to read to the end.
    reply = Reply(text="word " * 40, chunk_count=40)
    script(simulator, model, Step(reply=reply, fault=Fault(chunk_delay=0.25)))


@contextmanager
def _interrupt_after(agent: Agent, seconds: float, reason: str) -> Iterator[None]:
    """Interrupt ``agent`` from another thread after ``seconds``, as a stop button would."""
    timer = threading.Timer(seconds, agent.interrupt, args=(reason,))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()


async def _wait_disconnected(simulator: SimulatorServer, model: str) -> bool:
    return await asyncio.to_thread(
        simulator.state.wait_for,
        lambda reqs: any(r.scenario == model and r.outcome == "disconnected" for r in reqs),
        5.0,
    )


async def test_an_interrupt_during_a_slow_stream_ends_the_run_at_once(
    simulator: SimulatorServer, provider_for: ProviderFor, api_mode: ApiMode
) -> None:
    _slow_stream(simulator, "slow")
    agent = Agent(provider_for(api_mode, "slow"))
    events: list[AgentEvent] = []
    started = time.monotonic()
    async for event in agent.run(AgentRequest(user_message="talk slowly")):
        events.append(event)
        if isinstance(event, TextDelta) and len(events) > 3:
            agent.interrupt("user pressed stop", source=InterruptSource.STOP_API)
    elapsed = time.monotonic() - started
    end = finished(events)
    assert end.exit_reason is ExitReason.INTERRUPTED
    assert end.partial is True
    assert end.final_text.startswith("word")
    assert end.error == "Interrupted: user pressed stop"
    assert end.interrupt_source is InterruptSource.STOP_API
    assert elapsed < 4  # the stream alone would take about 10 s
    assert await _wait_disconnected(simulator, "slow")
    # Nothing of the abandoned call entered the transcript.
    assert [m["role"] for m in transcript_of(events)] == ["user"]
    # It was paid for, though: an estimate of it counts in the run's usage.
    assert end.model_calls == 1
    assert end.usage.input_tokens > 0
    assert end.usage.output_tokens > 0


async def test_an_interrupt_from_another_thread_stops_the_run(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    _slow_stream(simulator, "threaded")
    agent = Agent(provider_for("chat_completions", "threaded"))
    started = time.monotonic()
    with _interrupt_after(agent, 0.6, "from a thread"):
        result = await agent.run_conversation("talk slowly")
    assert result["exit_reason"] == "interrupted"
    assert time.monotonic() - started < 4
    assert await _wait_disconnected(simulator, "threaded")


async def test_an_interrupt_while_a_reply_is_fetched_in_one_piece_closes_the_upstream(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    _slow_stream(simulator, "unwatched")
    agent = Agent(provider_for("chat_completions", "unwatched"))
    started = time.monotonic()
    with _interrupt_after(agent, 0.6, "user pressed stop"):
        request = AgentRequest(user_message="hi", stream_model_replies=False)
        events = await run_events(agent, request)
    assert finished(events).exit_reason is ExitReason.INTERRUPTED
    assert time.monotonic() - started < 4  # the reply alone would take about 10 s
    assert await _wait_disconnected(simulator, "unwatched")
    [sent] = simulator.state.requests(scenario="unwatched")
    assert "stream" not in sent.body


def _sequential_tools(agent_box: list[Agent]) -> ToolRegistry:
    registry = ToolRegistry()

    async def stop_everything(arguments: dict[str, Any], ctx: ToolContext) -> str:
        agent_box[0].interrupt("stop requested by a tool")
        return "asked to stop"

    async def never_runs(arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise AssertionError("a tool after the interrupt must not start")

    for name, handler in (("stopper", stop_everything), ("later", never_runs)):
        registry.register(
            Tool(
                name=name,
                description=name,
                parameters={"type": "object"},
                handler=handler,
                concurrent_safe=False,
            )
        )
    return registry


async def test_tools_not_yet_started_get_a_cancelled_result(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    box: list[Agent] = []
    script(simulator, "seq", Step(reply=Reply(tool_calls=[call("stopper"), call("later")])))
    agent = Agent(provider_for("chat_completions", "seq"), tools=_sequential_tools(box))
    box.append(agent)
    result = await agent.run_conversation("go")
    assert result["exit_reason"] == "interrupted"
    tool_results = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert tool_results == ["asked to stop", CANCELLED_BEFORE_START]
    # No model call was made after the interrupt.
    assert len(simulator.state.requests(scenario="seq")) == 1


async def test_a_running_tool_finishes_and_its_result_is_kept(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    registry = ToolRegistry()
    agent_box: list[Agent] = []

    @registry.tool(description="Work for a while.", parameters={"type": "object"})
    async def work(arguments: dict[str, Any], ctx: ToolContext) -> str:
        agent_box[0].interrupt("while working")
        await asyncio.sleep(0.2)
        return f"finished work (interrupted={ctx.is_interrupted()})"

    script(simulator, "work", Step(reply=Reply(tool_calls=[call("work"), call("work")])))
    agent = Agent(provider_for("chat_completions", "work"), tools=registry)
    agent_box.append(agent)
    result = await agent.run_conversation("work")
    assert result["exit_reason"] == "interrupted"
    tool_results = [m["content"] for m in result["messages"] if m["role"] == "tool"]
    assert tool_results == ["finished work (interrupted=True)"] * 2


async def test_a_cancellable_tool_is_cancelled_by_an_interrupt(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    agent_box: list[Agent] = []

    async def endless(arguments: dict[str, Any], ctx: ToolContext) -> str:
        asyncio.get_running_loop().call_later(0.2, agent_box[0].interrupt, "enough")
        await asyncio.sleep(30)
        return "never"

    registry = ToolRegistry(
        [
            Tool(
                name="endless",
                description="Runs forever.",
                parameters={"type": "object"},
                handler=endless,
                cancellable=True,
            )
        ]
    )
    script(simulator, "endless", Step(reply=Reply(tool_calls=[call("endless")])))
    agent = Agent(provider_for("chat_completions", "endless"), tools=registry)
    agent_box.append(agent)
    started = time.monotonic()
    events = await run_events(agent, AgentRequest(user_message="go"))
    assert time.monotonic() - started < 3
    assert finished(events).exit_reason is ExitReason.INTERRUPTED
    done = [e for e in events if isinstance(e, ToolFinished)]
    assert [(e.ok, e.result_preview) for e in done] == [(False, CANCELLED_WHILE_RUNNING)]


async def test_an_interrupt_between_runs_applies_to_the_next_run_only(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "later", Step(reply=Reply(text="first")), Step(reply=Reply(text="second")))
    agent = Agent(provider_for("chat_completions", "later"))
    agent.interrupt("early stop")
    stopped = await run_events(agent, AgentRequest(user_message="one"))
    assert finished(stopped).interrupt_source is InterruptSource.OTHER  # the default
    agent.interrupt("early stop")
    interrupted = await agent.run_conversation("one")
    assert interrupted["exit_reason"] == "interrupted"
    assert interrupted["model_calls"] == 0
    clean = await agent.run_conversation("two")
    assert clean["exit_reason"] == "completed"
    assert clean["final_response"] == "first"


async def test_an_interrupted_call_leaves_no_cancellation_on_the_task_that_ran_it(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    # The call runs in the caller's task and is interrupted by cancelling that task: the call
    # takes the cancellation back, so what the task does after the run is not cancelled.
    _slow_stream(simulator, "inline")
    agent = Agent(provider_for("chat_completions", "inline"))
    events: list[AgentEvent] = []
    with _interrupt_after(agent, 0.6, "stop"):
        await agent.execute(AgentRequest(user_message="talk slowly"), events.append)
    assert finished(events).exit_reason is ExitReason.INTERRUPTED
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0.01)  # would raise CancelledError if one were left pending


async def test_a_run_whose_task_is_cancelled_mid_call_is_cancelled_not_interrupted(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    _slow_stream(simulator, "torn")
    agent = Agent(provider_for("chat_completions", "torn"))
    events: list[AgentEvent] = []
    streaming = asyncio.Event()

    def deliver(event: AgentEvent) -> None:
        events.append(event)
        if isinstance(event, TextDelta):
            streaming.set()

    running = asyncio.create_task(agent.execute(AgentRequest(user_message="talk"), deliver))
    await asyncio.wait_for(streaming.wait(), 10)
    agent.interrupt("stop", source=InterruptSource.STOP_API)  # both at once: teardown wins
    running.cancel()
    done, _ = await asyncio.wait({running}, timeout=10)
    assert running in done
    assert running.cancelled()
    assert await _wait_disconnected(simulator, "torn")
