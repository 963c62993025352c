"""ToolExecutor.run_batch: order, concurrency, failures, interrupts, approvals, hooks, events."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hermes_core.agent.emitter import Emitter
from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    ToolFinished,
    ToolOutcome,
    ToolStarted,
)
from hermes_core.tools.executor import (
    CANCELLED_BEFORE_START,
    CANCELLED_WHILE_RUNNING,
    CallResult,
    PlannedCall,
    ToolExecutor,
)
from hermes_core.tools.registry import (
    ApprovalAsk,
    ApprovalCallback,
    ApprovalVerdict,
    Tool,
    ToolCallRequest,
    ToolContext,
    ToolHandler,
    ToolRegistry,
)

SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class Recorder:
    """Where the executor's events go: a real :class:`Emitter` that keeps them in a list."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []
        self.emit = Emitter("r", self.events.append).emit

    def stable(self) -> list[AgentEvent]:
        """The events with durations zeroed, for whole-stream comparison."""
        return [
            replace(e, duration_s=0.0) if isinstance(e, ToolFinished) else e for e in self.events
        ]


def _tool(name: str, handler: ToolHandler, **flags: Any) -> Tool:
    return Tool(name=name, description="", parameters=SCHEMA, handler=handler, **flags)


def _planned(call_id: str, tool: Tool, **arguments: Any) -> PlannedCall:
    return PlannedCall(call_id=call_id, name=tool.name, arguments=arguments, tool=tool)


def _executor(
    recorder: Recorder,
    *tools: Tool,
    interrupted: asyncio.Event | None = None,
    approval_callback: ApprovalCallback | None = None,
    registry: ToolRegistry | None = None,
) -> ToolExecutor:
    return ToolExecutor(
        registry=registry or ToolRegistry(tools),
        emit=recorder.emit,
        run_id="r",
        task_id="t",
        interrupted=interrupted or asyncio.Event(),
        approval_callback=approval_callback,
    )


def _stable(results: Sequence[CallResult]) -> list[CallResult]:
    return [replace(r, duration_s=0.0) for r in results]


def _sleeper(seconds: float, log: list[str] | None = None) -> ToolHandler:
    async def handler(arguments: dict[str, Any], context: ToolContext) -> str:
        if log is not None:
            log.append(f"start {context.call_id}")
        await asyncio.sleep(seconds)
        if log is not None:
            log.append(f"end {context.call_id}")
        return f"slept {seconds}"

    return handler


async def _interrupt_after(event: asyncio.Event, seconds: float) -> None:
    await asyncio.sleep(seconds)
    event.set()


async def test_results_come_back_in_call_order_whatever_the_completion_order() -> None:
    finished: list[str] = []

    def sleeper(seconds: float) -> ToolHandler:
        async def handler(arguments: dict[str, Any], context: ToolContext) -> str:
            await asyncio.sleep(seconds)
            finished.append(context.call_id)
            return context.call_id.upper()

        return handler

    slow, medium, fast = (
        _tool("slow", sleeper(0.2)),
        _tool("medium", sleeper(0.1)),
        _tool("fast", sleeper(0.0)),
    )
    calls = [_planned("a", slow), _planned("b", medium), _planned("c", fast)]

    results = await _executor(Recorder(), slow, medium, fast).run_batch(calls)

    assert finished == ["c", "b", "a"]
    assert _stable(results) == [
        CallResult(call_id="a", name="slow", content="A", outcome=ToolOutcome.SUCCESS),
        CallResult(call_id="b", name="medium", content="B", outcome=ToolOutcome.SUCCESS),
        CallResult(call_id="c", name="fast", content="C", outcome=ToolOutcome.SUCCESS),
    ]


async def test_concurrent_safe_async_tools_run_at_the_same_time() -> None:
    nap = _tool("nap", _sleeper(0.3))
    calls = [_planned(call_id, nap) for call_id in ("a", "b", "c")]

    started = time.monotonic()
    results = await _executor(Recorder(), nap).run_batch(calls)
    elapsed = time.monotonic() - started

    assert [r.content for r in results] == ["slept 0.3"] * 3
    assert elapsed < 0.75  # one after the other would take 0.9 s


async def test_blocking_tools_run_at_the_same_time_in_worker_threads() -> None:
    threads: list[int] = []

    def block(arguments: dict[str, Any], context: ToolContext) -> str:
        threads.append(threading.get_ident())
        time.sleep(0.3)
        return "woke"

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    blocker = _tool("block", block)
    calls = [_planned(call_id, blocker) for call_id in ("a", "b", "c")]
    ticker = asyncio.create_task(tick())

    started = time.monotonic()
    results = await _executor(Recorder(), blocker).run_batch(calls)
    elapsed = time.monotonic() - started
    ticker.cancel()
    await asyncio.gather(ticker, return_exceptions=True)

    assert [r.content for r in results] == ["woke"] * 3
    assert elapsed < 0.75  # one after the other would take 0.9 s
    assert len(set(threads)) == 3
    assert threading.get_ident() not in threads
    assert ticks >= 10  # the event loop kept running while the tools slept


async def test_an_interactive_tool_makes_the_batch_run_one_call_at_a_time() -> None:
    log: list[str] = []
    ask = _tool("ask", _sleeper(0.05, log), interactive=True)
    nap = _tool("nap", _sleeper(0.05, log))

    await _executor(Recorder(), ask, nap).run_batch([_planned("a", ask), _planned("b", nap)])

    assert log == ["start a", "end a", "start b", "end b"]


async def test_a_tool_not_safe_to_run_concurrently_makes_the_batch_sequential() -> None:
    log: list[str] = []
    write = _tool("write", _sleeper(0.05, log), concurrent_safe=False)
    nap = _tool("nap", _sleeper(0.05, log))
    calls = [_planned("a", nap), _planned("b", write), _planned("c", nap)]

    await _executor(Recorder(), write, nap).run_batch(calls)

    assert log == ["start a", "end a", "start b", "end b", "start c", "end c"]


async def test_every_call_emits_started_and_finished_events() -> None:
    def read(arguments: dict[str, Any], context: ToolContext) -> str:
        return "x" * 400

    tool = _tool("read_file", read)
    recorder = Recorder()

    results = await _executor(recorder, tool).run_batch([_planned("a", tool, path="README.md")])

    assert recorder.stable() == [
        ToolStarted(
            run_id="r",
            seq=0,
            call_id="a",
            name="read_file",
            arguments={"path": "README.md"},
            summary="read_file README.md",
        ),
        ToolFinished(
            run_id="r",
            seq=1,
            call_id="a",
            name="read_file",
            outcome=ToolOutcome.SUCCESS,
            duration_s=0.0,
            result_preview="x" * 400,
            error=None,
            result_chars=400,
        ),
    ]
    assert _stable(results) == [
        CallResult(call_id="a", name="read_file", content="x" * 400, outcome=ToolOutcome.SUCCESS)
    ]


async def test_the_duration_of_a_call_is_measured() -> None:
    nap = _tool("nap", _sleeper(0.05))
    recorder = Recorder()

    [result] = await _executor(recorder, nap).run_batch([_planned("a", nap)])

    finished = recorder.events[-1]
    assert isinstance(finished, ToolFinished)
    assert 0.05 <= result.duration_s == finished.duration_s < 1


async def test_a_result_that_is_not_text_is_rendered_as_json() -> None:
    def stat(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return {"size": 12, "name": "café"}

    tool = _tool("stat", stat)

    [result] = await _executor(Recorder(), tool).run_batch([_planned("a", tool)])

    assert result.content == '{"size": 12, "name": "café"}'


async def test_a_tool_sees_its_run_task_and_call_ids() -> None:
    seen: list[tuple[str, str, str, bool]] = []

    def look(arguments: dict[str, Any], context: ToolContext) -> str:
        seen.append((context.run_id, context.task_id, context.call_id, context.is_interrupted()))
        return "ok"

    tool = _tool("look", look)

    await _executor(Recorder(), tool).run_batch([_planned("c7", tool)])

    assert seen == [("r", "t", "c7", False)]


async def test_a_tool_that_raises_gives_an_error_result() -> None:
    def broken(arguments: dict[str, Any], context: ToolContext) -> str:
        raise FileNotFoundError("no such file: a.txt")

    tool = _tool("read_file", broken)
    recorder = Recorder()

    results = await _executor(recorder, tool).run_batch([_planned("a", tool)])

    message = "Error: FileNotFoundError: no such file: a.txt"
    assert _stable(results) == [
        CallResult(
            call_id="a", name="read_file", content=message, outcome=ToolOutcome.ERROR, error=message
        )
    ]
    assert recorder.stable()[-1] == ToolFinished(
        run_id="r",
        seq=1,
        call_id="a",
        name="read_file",
        outcome=ToolOutcome.ERROR,
        duration_s=0.0,
        result_preview=message,
        error=message,
        result_chars=len(message),
    )


async def test_a_tool_that_takes_too_long_times_out() -> None:
    slow = _tool("slow", _sleeper(5), timeout=0.05)

    started = time.monotonic()
    results = await _executor(Recorder(), slow).run_batch([_planned("a", slow)])

    assert time.monotonic() - started < 1
    assert _stable(results) == [
        CallResult(
            call_id="a",
            name="slow",
            content="Error: slow timed out after 0.05 s.",
            outcome=ToolOutcome.TIMEOUT,
            error="Error: slow timed out after 0.05 s.",
        )
    ]


async def test_a_tool_raising_its_own_timeout_error_gives_an_error_result() -> None:
    # A socket or an inner asyncio.wait_for raises TimeoutError; the tool itself has no timeout.
    async def fetch(arguments: dict[str, Any], context: ToolContext) -> str:
        raise TimeoutError("connect timed out")

    tool = _tool("fetch", fetch)

    results = await _executor(Recorder(), tool).run_batch([_planned("a", tool)])

    message = "Error: TimeoutError: connect timed out"
    assert _stable(results) == [
        CallResult(
            call_id="a", name="fetch", content=message, outcome=ToolOutcome.ERROR, error=message
        )
    ]


async def test_a_preset_result_answers_a_call_without_a_tool() -> None:
    recorder = Recorder()
    call = PlannedCall(
        call_id="a",
        name="no_such_tool",
        arguments={},
        tool=None,
        preset_result="Error: unknown tool 'no_such_tool'.",
    )

    results = await _executor(recorder).run_batch([call])

    message = "Error: unknown tool 'no_such_tool'."
    assert _stable(results) == [
        CallResult(
            call_id="a",
            name="no_such_tool",
            content=message,
            outcome=ToolOutcome.ERROR,
            error=message,
        )
    ]
    assert recorder.stable() == [
        ToolStarted(
            run_id="r",
            seq=0,
            call_id="a",
            name="no_such_tool",
            arguments={},
            summary="no_such_tool",
        ),
        ToolFinished(
            run_id="r",
            seq=1,
            call_id="a",
            name="no_such_tool",
            outcome=ToolOutcome.ERROR,
            duration_s=0.0,
            result_preview=message,
            error=message,
            result_chars=len(message),
        ),
    ]


async def test_a_call_without_a_tool_or_a_preset_result_gets_a_generic_error() -> None:
    call = PlannedCall(call_id="a", name="x", arguments={}, tool=None)

    [result] = await _executor(Recorder()).run_batch([call])

    assert (result.content, result.ok) == ("Error: this call could not be run.", False)


async def test_an_interrupt_before_a_sequential_call_cancels_it() -> None:
    interrupted = asyncio.Event()
    ran: list[str] = []

    def stop(arguments: dict[str, Any], context: ToolContext) -> str:
        ran.append(context.call_id)
        interrupted.set()
        return "stopping"

    first = _tool("stop", stop, concurrent_safe=False)
    second = _tool("write", stop, concurrent_safe=False)
    recorder = Recorder()
    executor = _executor(recorder, first, second, interrupted=interrupted)

    results = await executor.run_batch([_planned("a", first), _planned("b", second, path="x")])

    assert ran == ["a"]
    assert _stable(results) == [
        CallResult(call_id="a", name="stop", content="stopping", outcome=ToolOutcome.SUCCESS),
        CallResult(
            call_id="b",
            name="write",
            content=CANCELLED_BEFORE_START,
            outcome=ToolOutcome.CANCELLED,
            error=CANCELLED_BEFORE_START,
        ),
    ]
    assert CANCELLED_BEFORE_START == "Cancelled: the run was interrupted before this tool started."
    assert recorder.stable()[2:] == [
        ToolStarted(
            run_id="r", seq=2, call_id="b", name="write", arguments={"path": "x"}, summary="write"
        ),
        ToolFinished(
            run_id="r",
            seq=3,
            call_id="b",
            name="write",
            outcome=ToolOutcome.CANCELLED,
            duration_s=0.0,
            result_preview=CANCELLED_BEFORE_START,
            error=CANCELLED_BEFORE_START,
            result_chars=len(CANCELLED_BEFORE_START),
        ),
    ]


async def test_a_cancellable_tool_is_cancelled_by_an_interrupt() -> None:
    interrupted = asyncio.Event()
    outcome: list[str] = []

    async def crawl(arguments: dict[str, Any], context: ToolContext) -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "crawled"

    tool = _tool("crawl", crawl, cancellable=True)
    interrupter = asyncio.create_task(_interrupt_after(interrupted, 0.05))

    started = time.monotonic()
    results = await _executor(Recorder(), tool, interrupted=interrupted).run_batch(
        [_planned("a", tool)]
    )
    await interrupter

    assert time.monotonic() - started < 1
    assert outcome == ["cancelled"]
    assert _stable(results) == [
        CallResult(
            call_id="a",
            name="crawl",
            content=CANCELLED_WHILE_RUNNING,
            outcome=ToolOutcome.CANCELLED,
            error=CANCELLED_WHILE_RUNNING,
        )
    ]


async def test_a_tool_that_is_not_cancellable_finishes_after_an_interrupt() -> None:
    interrupted = asyncio.Event()
    tool = _tool("nap", _sleeper(0.15))
    interrupter = asyncio.create_task(_interrupt_after(interrupted, 0.02))

    results = await _executor(Recorder(), tool, interrupted=interrupted).run_batch(
        [_planned("a", tool)]
    )
    await interrupter

    assert _stable(results) == [
        CallResult(call_id="a", name="nap", content="slept 0.15", outcome=ToolOutcome.SUCCESS)
    ]


def _deleter(ran: list[str]) -> Tool:
    def rm(arguments: dict[str, Any], context: ToolContext) -> str:
        ran.append(str(arguments["path"]))
        return "deleted"

    def check(arguments: dict[str, Any]) -> str | None:
        return "deletes files" if arguments["path"] != "/tmp/scratch" else None

    return _tool("rm", rm, needs_approval=check)


def _approval_events(recorder: Recorder) -> list[tuple[str, ...]]:
    """The approval events, as (kind, call, tool, reason or decision); both of one call name
    the same approval."""
    events = [e for e in recorder.events if isinstance(e, ApprovalRequested | ApprovalResolved)]
    assert len({e.approval_id for e in events}) <= 1
    return [
        (e.kind, e.call_id, e.name, e.reason)
        if isinstance(e, ApprovalRequested)
        else (e.kind, e.call_id, e.name, e.decision.value)
        for e in events
    ]


ASKED = ("approval_requested", "a", "rm", "deletes files")


async def test_a_call_needing_approval_without_an_approver_is_denied() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    recorder = Recorder()

    results = await _executor(recorder, tool).run_batch([_planned("a", tool, path="/home")])

    denial = (
        "Denied: rm needs approval (deletes files) and no approver is configured. "
        "Do not retry; tell the user what you wanted to do."
    )
    assert ran == []
    assert _stable(results) == [
        CallResult(call_id="a", name="rm", content=denial, outcome=ToolOutcome.DENIED, error=denial)
    ]
    assert _approval_events(recorder) == [ASKED, ("approval_resolved", "a", "rm", "denied")]


async def test_an_approver_saying_yes_lets_the_call_run() -> None:
    ran: list[str] = []
    asked: list[ApprovalAsk] = []
    tool = _deleter(ran)
    recorder = Recorder()

    def approve(ask: ApprovalAsk) -> bool:
        asked.append(ask)
        return True

    executor = _executor(recorder, tool, approval_callback=approve)
    results = await executor.run_batch([_planned("a", tool, path="/home")])

    assert ran == ["/home"]
    assert [(r.content, r.ok) for r in results] == [("deleted", True)]
    assert [(ask.call, ask.reason) for ask in asked] == [
        (
            ToolCallRequest(
                call_id="a", name="rm", arguments={"path": "/home"}, run_id="r", task_id="t"
            ),
            "deletes files",
        )
    ]
    assert asked[0].approval_id.startswith("apr_")
    assert _approval_events(recorder) == [ASKED, ("approval_resolved", "a", "rm", "approved")]


async def test_an_approver_saying_no_denies_the_call() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    recorder = Recorder()

    async def refuse(ask: ApprovalAsk) -> bool:
        return False

    executor = _executor(recorder, tool, approval_callback=refuse)
    results = await executor.run_batch([_planned("a", tool, path="/home")])

    assert ran == []
    assert _stable(results) == [
        CallResult(
            call_id="a",
            name="rm",
            content=REFUSED,
            outcome=ToolOutcome.DENIED,
            error=REFUSED,
        )
    ]
    assert _approval_events(recorder) == [ASKED, ("approval_resolved", "a", "rm", "denied")]


REFUSED = "Denied by the user: rm (deletes files) did not run. Choose another way."


async def test_an_expired_approval_is_told_as_such_and_the_call_does_not_run() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    recorder = Recorder()
    executor = _executor(recorder, tool, approval_callback=lambda ask: ApprovalVerdict.EXPIRED)

    results = await executor.run_batch([_planned("a", tool, path="/home")])

    assert ran == []
    assert results[0].outcome is ToolOutcome.DENIED
    assert "nobody answered in time, so it did not run" in results[0].content
    assert _approval_events(recorder) == [ASKED, ("approval_resolved", "a", "rm", "expired")]


async def test_a_deferred_approval_leaves_the_call_waiting_and_remembered() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    recorder = Recorder()
    executor = _executor(recorder, tool, approval_callback=lambda ask: ApprovalVerdict.DEFERRED)

    results = await executor.run_batch([_planned("a", tool, path="/home")])

    assert ran == []
    assert results[0].outcome is ToolOutcome.AWAITING_APPROVAL
    assert results[0].content.startswith("Not run yet: this call waits for the user's approval")
    assert _approval_events(recorder) == [ASKED]  # resolved by a later run, not this one
    waiting = executor.take_deferred()
    assert [(ask.call.call_id, ask.reason) for ask in waiting] == [("a", "deletes files")]
    assert executor.take_deferred() == []


async def test_an_approved_call_runs_without_asking_again() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    recorder = Recorder()
    planned = dataclasses.replace(_planned("a", tool, path="/home"), approved=True)

    results = await _executor(recorder, tool).run_batch([planned])

    assert (ran, [r.ok for r in results], _approval_events(recorder)) == (["/home"], [True], [])


async def test_an_approver_that_raises_denies_the_call() -> None:
    ran: list[str] = []
    tool = _deleter(ran)

    def explode(ask: ApprovalAsk) -> bool:
        raise RuntimeError("approver is down")

    executor = _executor(Recorder(), tool, approval_callback=explode)
    results = await executor.run_batch([_planned("a", tool, path="/home")])

    assert ran == []
    assert [r.outcome for r in results] == [ToolOutcome.DENIED]


async def test_a_call_that_needs_no_approval_asks_nobody() -> None:
    ran: list[str] = []
    asked: list[str] = []
    tool = _deleter(ran)
    recorder = Recorder()

    def approve(ask: ApprovalAsk) -> bool:
        asked.append(ask.reason)
        return True

    executor = _executor(recorder, tool, approval_callback=approve)
    await executor.run_batch([_planned("a", tool, path="/tmp/scratch")])

    assert (ran, asked, _approval_events(recorder)) == (["/tmp/scratch"], [], [])


async def test_a_pre_hook_returning_a_string_blocks_the_call() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    registry = ToolRegistry([tool])
    seen: list[ToolCallRequest] = []

    async def policy(request: ToolCallRequest) -> str | None:
        seen.append(request)
        return "Blocked by policy: rm is not allowed here."

    registry.pre_hooks.append(policy)
    recorder = Recorder()

    results = await _executor(recorder, registry=registry).run_batch(
        [_planned("a", tool, path="/home")]
    )

    assert ran == []
    assert seen == [
        ToolCallRequest(
            call_id="a", name="rm", arguments={"path": "/home"}, run_id="r", task_id="t"
        )
    ]
    assert _stable(results) == [
        CallResult(
            call_id="a",
            name="rm",
            content="Blocked by policy: rm is not allowed here.",
            outcome=ToolOutcome.BLOCKED,
            error="Blocked by policy: rm is not allowed here.",
        )
    ]
    assert _approval_events(recorder) == []


async def test_a_pre_hook_returning_none_lets_the_call_run() -> None:
    ran: list[str] = []
    tool = _deleter(ran)
    registry = ToolRegistry([tool])
    registry.pre_hooks.append(lambda request: None)

    await _executor(Recorder(), registry=registry).run_batch(
        [_planned("a", tool, path="/tmp/scratch")]
    )

    assert ran == ["/tmp/scratch"]


async def test_post_hooks_rewrite_the_result_in_order() -> None:
    def secret(arguments: dict[str, Any], context: ToolContext) -> str:
        return "token=hunter2"

    async def redact(request: ToolCallRequest, content: str) -> str:
        return content.replace("hunter2", "***")

    def tag(request: ToolCallRequest, content: str) -> str:
        return f"[{request.name}] {content}"

    tool = _tool("env", secret)
    registry = ToolRegistry([tool])
    registry.post_hooks.extend([redact, tag])
    recorder = Recorder()

    results = await _executor(recorder, registry=registry).run_batch([_planned("a", tool)])

    assert [r.content for r in results] == ["[env] token=***"]
    finished = recorder.events[-1]
    assert isinstance(finished, ToolFinished)
    assert finished.result_preview == "[env] token=***"


async def test_a_batch_mixing_outcomes_gives_one_result_per_call_in_order() -> None:
    def fail(arguments: dict[str, Any], context: ToolContext) -> str:
        raise ValueError("bad input")

    good = _tool("good", _sleeper(0.01))
    bad = _tool("bad", fail)
    preset = PlannedCall(call_id="c", name="gone", arguments={}, tool=None, preset_result="nope")
    recorder = Recorder()

    results = await _executor(recorder, good, bad).run_batch(
        [_planned("a", good), _planned("b", bad), preset]
    )

    assert [(r.call_id, r.ok, r.content) for r in results] == [
        ("a", True, "slept 0.01"),
        ("b", False, "Error: ValueError: bad input"),
        ("c", False, "nope"),
    ]
    started = sorted(e.call_id for e in recorder.events if isinstance(e, ToolStarted))
    finished = sorted(e.call_id for e in recorder.events if isinstance(e, ToolFinished))
    assert (started, finished) == (["a", "b", "c"], ["a", "b", "c"])


async def test_a_tool_answering_with_an_error_is_a_failed_call() -> None:
    # Tools say a missing file or a refusal with an "Error: …" answer rather than raising:
    # the model reads it all the same, and clients show the call as failed, not done.
    async def missing(arguments: dict[str, Any], context: ToolContext) -> str:
        return "Error: no such file in the workspace."

    async def fine(arguments: dict[str, Any], context: ToolContext) -> str:
        return "Errors: none found."

    tools = _tool("read_file", missing), _tool("lint", fine)

    results = await _executor(Recorder(), *tools).run_batch(
        [_planned("a", tools[0]), _planned("b", tools[1])]
    )

    assert [result.outcome for result in results] == [ToolOutcome.ERROR, ToolOutcome.SUCCESS]
    assert results[0].content == "Error: no such file in the workspace."
