"""AgentCallbacks.dispatch: each event kind to its callback; failures logged, never raised."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from hermes_core.agent.callbacks import AgentCallbacks
from hermes_core.events import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    ClientToolCallsPending,
    CompressionPerformed,
    ExitReason,
    FallbackActivated,
    MessageAdded,
    ModelCallStarted,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolOutcome,
    ToolStarted,
)
from hermes_core.usage import Usage

Calls = list[tuple[str, tuple[Any, ...]]]

CALLBACK_NAMES = (
    "tool_progress_callback",
    "thinking_callback",
    "reasoning_callback",
    "clarify_callback",
    "step_callback",
    "stream_delta_callback",
    "tool_gen_callback",
    "status_callback",
)

TOOL_STARTED = ToolStarted(
    run_id="r", seq=1, call_id="c1", name="read_file", arguments={"path": "a"}, summary="read a"
)
TOOL_FINISHED = ToolFinished(
    run_id="r",
    seq=2,
    call_id="c1",
    name="read_file",
    outcome=ToolOutcome.ERROR,
    duration_s=0.5,
    result_preview="Error: gone",
    error="Error: gone",
)
STEP_FINISHED = StepFinished(
    run_id="r",
    seq=3,
    iteration=2,
    usage=Usage(input_tokens=10, output_tokens=5),
    provider="sim",
    model="m1",
    finish_reason="tool_calls",
)
RUN_FINISHED = RunFinished(
    run_id="r",
    seq=9,
    exit_reason=ExitReason.BUDGET_EXHAUSTED,
    final_text="done",
    iterations=3,
    usage=Usage(),
    model_calls=3,
)
SILENT_EVENTS: list[AgentEvent] = [
    ApprovalResolved(
        run_id="r",
        seq=1,
        approval_id="apr_1",
        call_id="c1",
        name="read_file",
        decision=ApprovalDecision.APPROVED,
    ),
    MessageAdded(run_id="r", seq=2, index=0, message={"role": "user", "content": "hi"}),
    ClientToolCallsPending(run_id="r", seq=3, tool_calls=[]),
]


def _recording(calls: Calls) -> AgentCallbacks:
    def recorder(name: str) -> Callable[..., None]:
        def callback(*args: Any) -> None:
            calls.append((name, args))

        return callback

    return AgentCallbacks(**{name: recorder(name) for name in CALLBACK_NAMES})


async def _dispatch_all(callbacks: AgentCallbacks, events: list[AgentEvent]) -> None:
    for event in events:
        await callbacks.dispatch(event)


async def test_tool_events_go_to_the_tool_progress_callback() -> None:
    calls: Calls = []

    await _dispatch_all(_recording(calls), [TOOL_STARTED, TOOL_FINISHED])

    assert calls == [
        (
            "tool_progress_callback",
            (
                "started",
                "read_file",
                {"call_id": "c1", "arguments": {"path": "a"}, "summary": "read a"},
            ),
        ),
        (
            "tool_progress_callback",
            (
                "finished",
                "read_file",
                {
                    "call_id": "c1",
                    "ok": False,
                    "outcome": "error",
                    "duration_s": 0.5,
                    "preview": "Error: gone",
                    "error": "Error: gone",
                },
            ),
        ),
    ]


async def test_a_model_call_starting_goes_to_the_thinking_callback() -> None:
    calls: Calls = []
    events: list[AgentEvent] = [
        ModelCallStarted(run_id="r", seq=1, iteration=1, provider="sim", model="m1"),
        ModelCallStarted(run_id="r", seq=2, iteration=3, provider="sim", model="m1", grace=True),
    ]

    await _dispatch_all(_recording(calls), events)

    assert calls == [
        ("thinking_callback", ("Calling m1",)),
        ("thinking_callback", ("Budget exhausted: asking m1 for a final answer",)),
    ]


async def test_streamed_pieces_go_to_their_callbacks() -> None:
    calls: Calls = []
    events: list[AgentEvent] = [
        ReasoningDelta(run_id="r", seq=1, text="hmm"),
        TextDelta(run_id="r", seq=2, text="Hello"),
        ToolCallGenerating(
            run_id="r", seq=3, index=0, call_id="c1", name="read_file", arguments_delta='{"pa'
        ),
    ]

    await _dispatch_all(_recording(calls), events)

    assert calls == [
        ("reasoning_callback", ("hmm",)),
        ("stream_delta_callback", ("Hello",)),
        ("tool_gen_callback", ("read_file", '{"pa')),
    ]


async def test_a_finished_step_goes_to_the_step_callback() -> None:
    calls: Calls = []

    await _dispatch_all(_recording(calls), [STEP_FINISHED])

    assert calls == [
        (
            "step_callback",
            (
                2,
                {
                    "usage": Usage(input_tokens=10, output_tokens=5),
                    "finish_reason": "tool_calls",
                    "provider": "sim",
                    "model": "m1",
                },
            ),
        )
    ]


async def test_lifecycle_events_go_to_the_status_callback() -> None:
    calls: Calls = []
    events: list[AgentEvent] = [
        RunStarted(run_id="r", seq=0, task_id="t", model="m1", provider="sim", budget=90),
        BudgetWarning(run_id="r", seq=1, tier="caution", used=63, total=90),
        FallbackActivated(
            run_id="r", seq=2, from_provider="primary", to_provider="backup", reason="rate_limit"
        ),
        CompressionPerformed(
            run_id="r",
            seq=3,
            tokens_before=9000,
            tokens_after=3000,
            messages_before=40,
            messages_after=12,
            session_id="s2",
            parent_session_id="s1",
            messages=[{"role": "user", "content": "summary"}],
            summarised=True,
        ),
        ApprovalRequested(
            run_id="r",
            seq=4,
            approval_id="apr_1",
            call_id="c1",
            name="rm",
            arguments={},
            reason="deletes files",
        ),
        RUN_FINISHED,
    ]

    await _dispatch_all(_recording(calls), events)

    assert calls == [
        ("status_callback", ("started", "m1")),
        ("status_callback", ("budget", "caution: 63/90 iterations")),
        ("status_callback", ("fallback", "primary → backup (rate_limit)")),
        ("status_callback", ("compression", "9000 → 3000 tokens")),
        ("status_callback", ("approval", "rm: deletes files")),
        ("status_callback", ("finished", "budget_exhausted")),
    ]


async def test_events_without_a_callback_call_nothing() -> None:
    calls: Calls = []

    await _dispatch_all(_recording(calls), SILENT_EVENTS)

    assert calls == []


async def test_unset_callbacks_are_skipped() -> None:
    events: list[AgentEvent] = [TOOL_STARTED, TOOL_FINISHED, STEP_FINISHED, RUN_FINISHED]

    await _dispatch_all(AgentCallbacks(), events)


async def test_async_callbacks_are_awaited() -> None:
    texts: list[str] = []

    async def on_delta(text: str) -> None:
        texts.append(text)

    callbacks = AgentCallbacks(stream_delta_callback=on_delta)

    await _dispatch_all(
        callbacks, [TextDelta(run_id="r", seq=1, text="a"), TextDelta(run_id="r", seq=2, text="b")]
    )

    assert texts == ["a", "b"]


async def test_a_callback_that_raises_is_logged_and_does_not_propagate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    texts: list[str] = []

    def broken(*args: Any) -> None:
        raise RuntimeError("display went away")

    callbacks = AgentCallbacks(tool_progress_callback=broken, stream_delta_callback=texts.append)

    with caplog.at_level(logging.ERROR, logger="hermes_core.agent.callbacks"):
        await _dispatch_all(callbacks, [TOOL_STARTED, TextDelta(run_id="r", seq=2, text="a")])

    assert texts == ["a"]
    assert [(r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("a callback raised; the run goes on", True)
    ]


async def test_an_async_callback_that_raises_is_logged_and_does_not_propagate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(*args: Any) -> None:
        raise RuntimeError("display went away")

    callbacks = AgentCallbacks(status_callback=broken)

    with caplog.at_level(logging.ERROR, logger="hermes_core.agent.callbacks"):
        await callbacks.dispatch(RUN_FINISHED)

    assert [r.getMessage() for r in caplog.records] == ["a callback raised; the run goes on"]


async def test_a_subagent_event_dispatches_its_inner_event() -> None:
    calls: Calls = []
    inner = TextDelta(run_id="child", seq=4, text="from the child")
    wrapped = SubagentEvent(run_id="r", seq=7, call_id="c1", child_index=0, event=inner)
    twice = SubagentEvent(run_id="r", seq=8, call_id="c2", child_index=1, event=wrapped)

    await _dispatch_all(_recording(calls), [wrapped, twice])

    assert calls == [
        ("stream_delta_callback", ("from the child",)),
        ("stream_delta_callback", ("from the child",)),
    ]
