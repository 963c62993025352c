"""The Responses view without HTTP: hand-built agent events in, ``response.*`` events out.

Every stream a test produces is also checked against the OpenAI SDK — each standard event
validates as a ``ResponseStreamEvent``, the SDK's own stream accumulator accepts the sequence,
the final object validates as a ``Response`` — and against the canonical order.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pydantic
import pytest
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent

from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    BudgetWarning,
    ClientToolCallsPending,
    CompressionPerformed,
    ExitReason,
    FallbackActivated,
    MessageAdded,
    ModelCallStarted,
    ReasoningDelta,
    RetryScheduled,
    RunFinished,
    RunStarted,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from hermes_core.messages import ToolCall
from hermes_core.usage import Usage
from server.views.response_mcp import RemoteMcpTools, RemoteTool
from server.views.responses import Progress, ResponsesView, response_usage

RUN = "run_1"
RESPONSE_ID = "resp_abc"
CREATED_AT = 1_767_000_000
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
STREAM_EVENT: pydantic.TypeAdapter[ResponseStreamEvent] = pydantic.TypeAdapter(ResponseStreamEvent)


def make_shell(status: str = "in_progress") -> dict[str, Any]:
    """A Response object before any output, with all 31 keys."""
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": CREATED_AT,
        "completed_at": None,
        "status": status,
        "incomplete_details": None,
        "model": "hermes-agent",
        "previous_response_id": None,
        "instructions": None,
        "output": [],
        "error": None,
        "tools": [],
        "tool_choice": "auto",
        "truncation": "disabled",
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}},
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "temperature": 1.0,
        "top_logprobs": 0,
        "reasoning": None,
        "usage": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "store": True,
        "background": False,
        "service_tier": "default",
        "metadata": {},
        "safety_identifier": None,
        "prompt_cache_key": None,
    }


# --- events ---------------------------------------------------------------------------------


def text(piece: str) -> TextDelta:
    return TextDelta(run_id=RUN, seq=0, text=piece)


def thought(piece: str) -> ReasoningDelta:
    return ReasoningDelta(run_id=RUN, seq=0, text=piece)


def started(call_id: str = "call_1", name: str = "lookup") -> ToolStarted:
    arguments = {"word": "zebra"}
    return ToolStarted(
        run_id=RUN, seq=0, call_id=call_id, name=name, arguments=arguments, summary=f"{name} zebra"
    )


def finished(
    call_id: str = "call_1", name: str = "lookup", *, error: str | None = None
) -> ToolFinished:
    return ToolFinished(
        run_id=RUN,
        seq=0,
        call_id=call_id,
        name=name,
        outcome=ToolOutcome.SUCCESS if error is None else ToolOutcome.ERROR,
        duration_s=0.012,
        result_preview="" if error else "a striped horse",
        error=error,
    )


def end(reason: ExitReason = ExitReason.COMPLETED, *, error: str | None = None) -> RunFinished:
    usage = Usage(input_tokens=100, cache_read_tokens=40, output_tokens=20, reasoning_tokens=5)
    return RunFinished(
        run_id=RUN,
        seq=0,
        exit_reason=reason,
        final_text="",
        iterations=2,
        usage=usage,
        model_calls=2,
        error=error,
        session_id="sess_1",
    )


def numbered(*events: AgentEvent) -> list[AgentEvent]:
    """The events with their run sequence numbers 0, 1, 2, ..."""
    return [dataclasses.replace(event, seq=seq) for seq, event in enumerate(events)]


# --- driving and checking -------------------------------------------------------------------


def stream(
    *events: AgentEvent,
    progress: Progress = "reasoning",
    shell: dict[str, Any] | None = None,
    remote_mcp: RemoteMcpTools | None = None,
) -> tuple[list[dict[str, Any]], ResponsesView]:
    """Every frame the view produces for ``events``, checked; and the view."""
    view = ResponsesView(
        shell or make_shell(),
        progress=progress,
        completed_at=CREATED_AT + 5,
        remote_mcp=remote_mcp,
    )
    frames = view.opening()
    for event in numbered(*events):
        frames += view.handle(event)
    check_with_sdk(frames, view)
    check_canonical(frames)
    return frames, view


def check_with_sdk(frames: list[dict[str, Any]], view: ResponsesView) -> None:
    state: ResponseStreamState[object] = ResponseStreamState(input_tools=omit, text_format=omit)
    for frame in frames:
        if not frame["type"].startswith("hermes:"):
            state.handle_event(STREAM_EVENT.validate_python(frame))
    Response.model_validate(view.response)


_ITEM_EVENTS = {
    "message": r"(content_part\.added ((output_text\.delta )+output_text\.done"
    r"|refusal\.delta refusal\.done) content_part\.done )+",
    "reasoning": r"(reasoning_summary_part\.added (reasoning_summary_text\.delta )+"
    r"reasoning_summary_text\.done reasoning_summary_part\.done )+",
    "function_call": r"function_call_arguments\.delta function_call_arguments\.done ",
    "function_call_output": r"",
    "mcp_list_tools": r"mcp_list_tools\.in_progress mcp_list_tools\.completed ",
    "mcp_call": r"mcp_call\.in_progress mcp_call_arguments\.delta mcp_call_arguments\.done "
    r"mcp_call\.completed ",
    "mcp_approval_request": r"",
}


def check_canonical(frames: list[dict[str, Any]]) -> None:
    """Sequence numbers, one terminal event, and every item added → its events → done."""
    assert [frame["sequence_number"] for frame in frames] == list(range(len(frames)))
    assert frames[0]["type"] == "response.created"
    assert [i for i, f in enumerate(frames) if f["type"] in TERMINAL] == [len(frames) - 1]
    assert {f["response"]["id"] for f in frames if "response" in f} == {RESPONSE_ID}
    final_output = frames[-1]["response"]["output"]
    added: list[dict[str, Any]] = []
    inside: list[str] | None = None  # the events of the item being streamed
    for frame in frames:
        kind = frame["type"]
        if kind == "response.output_item.added":
            assert inside is None
            assert frame["output_index"] == len(added)
            assert frame["item"].get("status", "in_progress") == "in_progress"
            added.append(frame["item"])
            inside = []
        elif kind == "response.output_item.done":
            assert inside is not None
            item = frame["item"]
            assert frame["output_index"] == len(added) - 1
            assert (item["type"], item["id"], item.get("call_id")) == (
                added[-1]["type"],
                added[-1]["id"],
                added[-1].get("call_id"),
            )
            assert item.get("status", "completed") == "completed"
            assert item == final_output[frame["output_index"]]
            assert re.fullmatch(_ITEM_EVENTS[item["type"]], "".join(inside))
            inside = None
        elif "output_index" in frame:
            assert inside is not None
            assert frame["output_index"] == len(added) - 1
            assert frame["item_id"] == added[-1]["id"]
            inside.append(kind.removeprefix("response.") + " ")
    assert inside is None
    assert len(added) == len(final_output)


def types(frames: list[dict[str, Any]]) -> list[str]:
    return [frame["type"] for frame in frames]


def items(view: ResponsesView) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = view.response["output"]
    return output


def summaries(item: dict[str, Any]) -> list[str]:
    return [part["text"] for part in item["summary"]]


# --- opening --------------------------------------------------------------------------------


def test_the_stream_opens_with_created_then_in_progress_carrying_the_shell() -> None:
    view = ResponsesView(make_shell())
    assert view.opening() == [
        {"type": "response.created", "sequence_number": 0, "response": make_shell()},
        {"type": "response.in_progress", "sequence_number": 1, "response": make_shell()},
    ]


def test_a_queued_response_opens_queued_and_is_in_progress_from_the_first_event() -> None:
    begin = RunStarted(run_id=RUN, seq=0, task_id="t", model="m", provider="p", budget=10)
    frames, _ = stream(begin, end(), shell=make_shell("queued"))
    assert types(frames)[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert [f["response"]["status"] for f in frames[:3]] == ["queued", "queued", "in_progress"]


def test_the_view_works_on_its_own_copy_of_the_shell() -> None:
    shell = make_shell()
    stream(text("Hi"), end(), shell=shell)
    assert shell == make_shell()


# --- the canonical order --------------------------------------------------------------------


def test_sequence_numbers_run_from_zero_without_gaps() -> None:
    frames, _ = stream(thought("hmm"), started(), finished(), text("Hi"), end())
    assert [frame["sequence_number"] for frame in frames] == list(range(len(frames)))
    assert len(frames) > 20


def test_exactly_one_terminal_event_comes_last_and_nothing_follows_it() -> None:
    frames, view = stream(text("Hi"), end())
    assert [t for t in types(frames) if t in TERMINAL] == ["response.completed"]
    assert types(frames)[-1] == "response.completed"
    assert view.done
    assert view.handle(text("more")) == []
    assert view.handle(end()) == []


def test_each_output_index_is_the_items_position_in_the_final_output() -> None:
    frames, view = stream(thought("a"), text("b"), thought("c"), text("d"), end())
    done = [f for f in frames if f["type"] == "response.output_item.done"]
    assert [f["output_index"] for f in done] == [0, 1, 2, 3]
    assert [f["item"] for f in done] == items(view)
    assert [item["id"] for item in items(view)] == [
        "rs_abc_0",
        "msg_abc_1",
        "rs_abc_2",
        "msg_abc_3",
    ]


def test_model_text_becomes_a_message_item() -> None:
    frames, view = stream(text("Hel"), text("lo"), end())
    where = {"item_id": "msg_abc_0", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    item = {"type": "message", "id": "msg_abc_0", "status": "in_progress", "role": "assistant"}
    assert frames[2:-1] == [
        {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
         "item": {**item, "content": []}},
        {"type": "response.content_part.added", "sequence_number": 3, **where, "part": part},
        {"type": "response.output_text.delta", "sequence_number": 4, **where, "delta": "Hel",
         "logprobs": []},
        {"type": "response.output_text.delta", "sequence_number": 5, **where, "delta": "lo",
         "logprobs": []},
        {"type": "response.output_text.done", "sequence_number": 6, **where, "text": "Hello",
         "logprobs": []},
        {"type": "response.content_part.done", "sequence_number": 7, **where,
         "part": {**part, "text": "Hello"}},
        {"type": "response.output_item.done", "sequence_number": 8, "output_index": 0,
         "item": {**item, "status": "completed", "content": [{**part, "text": "Hello"}]}},
    ]  # fmt: skip
    assert view.response["output"] == [frames[8]["item"]]


def test_reasoning_and_tool_lines_become_reasoning_summaries_never_function_calls() -> None:
    frames, view = stream(
        thought("Let me look."), started(), finished(), started("call_2"),
        finished("call_2", error="no such word"), text("Zebras."), end(),
    )  # fmt: skip
    assert [item["type"] for item in items(view)] == ["reasoning", "message"]
    assert summaries(items(view)[0]) == [
        "Let me look.",
        "→ lookup zebra\n",
        "✓ lookup (12 ms)\n",
        "→ lookup zebra\n",
        "✗ lookup (12 ms): no such word\n",
    ]
    assert not [t for t in types(frames) if "function_call" in t]


def test_sub_agent_tool_lines_carry_the_sub_agent_prefix() -> None:
    inner = started("call_9", "grep")
    _, view = stream(
        SubagentEvent(run_id=RUN, seq=0, call_id="call_1", child_index=1, event=inner), end()
    )
    assert summaries(items(view)[0]) == ["  ↳ [2] → grep zebra\n"]


def test_status_and_fallback_lines_go_to_the_reasoning_summary() -> None:
    _, view = stream(
        RetryScheduled(run_id=RUN, seq=0, provider="up", attempt=1, delay_s=2, reason="rate_limit"),
        BudgetWarning(run_id=RUN, seq=0, tier="warning", used=8, total=10),
        CompressionPerformed(
            run_id=RUN,
            seq=0,
            tokens_before=9000,
            tokens_after=2000,
            messages_before=40,
            messages_after=6,
            session_id="s2",
            parent_session_id="s1",
            messages=[],
            summarised=True,
        ),
        FallbackActivated(run_id=RUN, seq=0, from_provider="up", to_provider="alt", reason="auth"),
        end(),
    )
    assert summaries(items(view)[0]) == [
        "· up failed (rate_limit); retrying in 2.0 s\n",
        "· Iteration budget: 8/10 used\n",
        "· Context compressed: 9000 → 2000 tokens\n",
        "↪ up failed (auth); continuing on alt\n",
    ]


def test_model_reasoning_after_a_tool_line_starts_a_new_summary_part() -> None:
    _, view = stream(thought("a"), thought("b"), started(), thought("c"), end())
    assert summaries(items(view)[0]) == ["ab", "→ lookup zebra\n", "c"]


def test_text_after_reasoning_closes_it_and_reasoning_after_text_opens_a_new_item() -> None:
    frames, view = stream(thought("plan"), text("Checking."), started(), text("Done."), end())
    assert [item["type"] for item in items(view)] == [
        "reasoning",
        "message",
        "reasoning",
        "message",
    ]
    summary = [
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
    ]
    content = ["content_part.added", "output_text.delta", "output_text.done", "content_part.done"]
    assert [t.removeprefix("response.") for t in types(frames)[2:-1]] == [
        "output_item.added", *summary, "output_item.done",
        "output_item.added", *content, "output_item.done",
        "output_item.added", *summary, "output_item.done",
        "output_item.added", *content, "output_item.done",
    ]  # fmt: skip


def test_events_that_change_nothing_visible_produce_no_frames() -> None:
    view = ResponsesView(make_shell())
    view.opening()
    quiet: list[AgentEvent] = [
        RunStarted(run_id=RUN, seq=0, task_id="t", model="m", provider="p", budget=10),
        ModelCallStarted(run_id=RUN, seq=1, iteration=1, provider="p", model="m"),
        ToolCallGenerating(run_id=RUN, seq=2, index=0, call_id="c", name="n", arguments_delta="{"),
        MessageAdded(run_id=RUN, seq=5, index=0, message={"role": "assistant", "content": "x"}),
        StepFinished(
            run_id=RUN,
            seq=6,
            iteration=1,
            usage=Usage(),
            provider="p",
            model="m",
            finish_reason="stop",
        ),
        text(""),
        thought(""),
        SubagentEvent(run_id=RUN, seq=7, call_id="c", child_index=0, event=text("child text")),
    ]
    assert [view.handle(event) for event in quiet] == [[] for _ in quiet]
    assert view.handle(text("x"))[0]["sequence_number"] == 2


# --- client tools ---------------------------------------------------------------------------


def test_client_tool_calls_become_function_call_items() -> None:
    calls: list[ToolCall] = [
        {"id": "call_w", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"id": "call_t", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
    ]  # fmt: skip
    frames, view = stream(
        text("Let me check."),
        ClientToolCallsPending(run_id=RUN, seq=0, tool_calls=calls),
        end(ExitReason.AWAITING_CLIENT_TOOLS),
    )
    assert items(view)[1:] == [
        {"type": "function_call", "id": "fc_abc_1", "call_id": "call_w", "name": "get_weather",
         "arguments": '{"city":"Paris"}', "status": "completed"},
        {"type": "function_call", "id": "fc_abc_2", "call_id": "call_t", "name": "get_time",
         "arguments": "{}", "status": "completed"},
    ]  # fmt: skip
    added = [f["item"] for f in frames if f["type"] == "response.output_item.added"]
    assert added[1] == {**items(view)[1], "arguments": "", "status": "in_progress"}
    deltas = [f["delta"] for f in frames if f["type"] == "response.function_call_arguments.delta"]
    assert deltas == ['{"city":"Paris"}', "{}"]
    assert view.response["status"] == "completed"


# --- endings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "status", "terminal", "details"),
    [
        (ExitReason.COMPLETED, "completed", "response.completed", None),
        (ExitReason.AWAITING_CLIENT_TOOLS, "completed", "response.completed", None),
        (ExitReason.TRUNCATED, "incomplete", "response.incomplete", "max_output_tokens"),
        (ExitReason.BUDGET_EXHAUSTED, "incomplete", "response.incomplete", "max_messages"),
        (ExitReason.INTERRUPTED, "cancelled", "response.incomplete", None),
        (ExitReason.FAILED, "failed", "response.failed", None),
    ],
)
def test_each_exit_reason_sets_its_status_and_terminal_event(
    reason: ExitReason, status: str, terminal: str, details: str | None
) -> None:
    frames, view = stream(text("partial"), end(reason, error="why"))
    final = view.response
    assert frames[-1] == {"type": terminal, "sequence_number": len(frames) - 1, "response": final}
    assert final["status"] == status
    assert final["incomplete_details"] == (None if details is None else {"reason": details})
    assert final["completed_at"] == (CREATED_AT + 5 if status == "completed" else None)
    assert final["hermes"]["exit_reason"] == reason.value


def test_the_final_response_carries_usage_and_the_hermes_summary() -> None:
    _, view = stream(text("Hi"), end())
    final = view.response
    assert final["usage"] == {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 5},
        "total_tokens": 120,
    }
    assert final["hermes"] == {
        "run_id": RUN,
        "session_id": "sess_1",
        "exit_reason": "completed",
        "iterations": 2,
        "model_calls": 2,
        "cost_usd": 0.0,
        "error": None,
    }


def test_a_failure_sends_an_error_event_in_both_shapes_then_response_failed() -> None:
    frames, view = stream(end(ExitReason.FAILED, error="upstream returned 503"))
    message = "upstream returned 503"
    assert frames[-2] == {
        "type": "error",
        "sequence_number": len(frames) - 2,
        "code": "server_error",
        "message": message,
        "param": None,
        "error": {
            "type": "server_error",
            "code": "server_error",
            "message": message,
            "param": None,
        },
    }
    assert types(frames)[-1] == "response.failed"
    assert view.response["error"] == {"code": "server_error", "message": message}


def test_a_run_that_fails_after_some_text_keeps_that_text_closed_in_the_output() -> None:
    frames, view = stream(text("Half an ans"), end(ExitReason.FAILED, error="boom"))
    assert types(frames)[-4:] == [
        "response.content_part.done",
        "response.output_item.done",
        "error",
        "response.failed",
    ]
    assert [item["content"][0]["text"] for item in items(view)] == ["Half an ans"]


def test_the_same_events_give_byte_identical_output() -> None:
    events = (thought("hmm"), started(), finished(), text("Hi"), end(ExitReason.TRUNCATED))
    first, _ = stream(*events, progress="openwebui")
    second, _ = stream(*events, progress="openwebui")
    assert json.dumps(first, ensure_ascii=False) == json.dumps(second, ensure_ascii=False)


def test_without_a_given_completed_at_the_clock_is_read_when_the_run_ends() -> None:
    view = ResponsesView(make_shell())
    view.handle(end())
    assert view.response["completed_at"] >= CREATED_AT


def test_response_usage_always_reports_cache_writes() -> None:
    assert response_usage(Usage())["input_tokens_details"] == {
        "cached_tokens": 0,
        "cache_write_tokens": 0,
    }


# --- progress modes -------------------------------------------------------------------------


def test_events_mode_adds_structured_tool_progress_events() -> None:
    frames, view = stream(started(), finished(error="boom"), text("ok"), end(), progress="events")
    progress = [f for f in frames if f["type"] == "hermes:tool_progress"]
    assert progress == [
        {"type": "hermes:tool_progress", "sequence_number": progress[0]["sequence_number"],
         "phase": "started", "call_id": "call_1", "name": "lookup",
         "arguments": {"word": "zebra"}},
        {"type": "hermes:tool_progress", "sequence_number": progress[1]["sequence_number"],
         "phase": "finished", "call_id": "call_1", "name": "lookup", "ok": False,
         "outcome": "error", "duration_ms": 12, "preview": "", "error": "boom"},
    ]  # fmt: skip
    assert [item["type"] for item in items(view)] == ["reasoning", "message"]


def test_a_running_tools_output_is_an_event_only_in_events_mode() -> None:
    output = ToolProgress(run_id=RUN, seq=1, call_id="call_1", name="lookup", output="half\n")

    shown, _ = stream(started(), output, finished(), end(), progress="events")
    hidden, _ = stream(started(), output, finished(), end())

    progress = [f for f in shown if f["type"] == "hermes:tool_progress"]
    assert [(f["phase"], f.get("output")) for f in progress] == [
        ("started", None),
        ("progress", "half\n"),
        ("finished", None),
    ]
    assert not [f for f in hidden if f["type"].startswith("hermes:")]


def test_openwebui_mode_shows_server_tools_as_cards_each_with_its_output() -> None:
    _, view = stream(
        started(), started("call_2", "wait"), finished(), finished("call_2", "wait", error="slow"),
        text("Done."), end(), progress="openwebui",
    )  # fmt: skip
    cards = [item for item in items(view) if item["type"].startswith("function_call")]
    assert [(c["type"], c["call_id"]) for c in cards] == [
        ("function_call", "call_1"),
        ("function_call", "call_2"),
        ("function_call_output", "call_1"),
        ("function_call_output", "call_2"),
    ]
    assert cards[0]["arguments"] == '{"word": "zebra"}'
    assert [c["output"] for c in cards[2:]] == [
        [{"type": "input_text", "text": "a striped horse"}],
        [{"type": "input_text", "text": "Error: slow"}],
    ]
    assert "reasoning" not in [item["type"] for item in items(view)]  # steps are status lines


def statuses(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Open WebUI's status lines in a stream (``hermes:status`` events)."""
    return [f["event"]["data"] for f in frames if f["type"] == "hermes:status"]


def test_openwebui_mode_shows_tool_steps_as_status_lines_all_done() -> None:
    progress = ToolProgress(run_id=RUN, seq=0, call_id="call_1", name="lookup", output="step 2\n")

    frames, _ = stream(started(), progress, finished(), text("Done."), end(), progress="openwebui")

    assert statuses(frames) == [
        {"description": "lookup zebra", "done": True},
        {"description": "lookup: step 2", "done": True},
        {"description": "lookup done", "done": True},
        {"description": "Done", "done": True},
    ]


def openwebui_stream(*events: AgentEvent) -> tuple[list[dict[str, Any]], ResponsesView]:
    """Every frame Open WebUI mode produces for ``events``, numbered but not checked against
    the SDK: a card's ``failed`` (as its ``rejected``) is a status Open WebUI draws, which
    OpenAI's ``function_call`` does not have, and its card is done a second time when it fails."""
    view = ResponsesView(make_shell(), progress="openwebui", completed_at=CREATED_AT + 5)
    frames = view.opening()
    for event in numbered(*events):
        frames += view.handle(event)
    assert [frame["sequence_number"] for frame in frames] == list(range(len(frames)))
    return frames, view


def test_a_command_that_exited_non_zero_is_a_failed_step() -> None:
    report = "[exit code 2; 0.0 s]\nls: cannot access 'nope'"
    ran = dataclasses.replace(finished(name="shell"), result_preview=report)

    frames, _ = stream(started(name="shell"), ran, end(), progress="reasoning")
    webui, _ = openwebui_stream(started(name="shell"), ran, end())

    lines = [f["delta"] for f in frames if f["type"] == "response.reasoning_summary_text.delta"]
    assert "✗ shell (12 ms): exit code 2\n" in lines
    assert "shell failed: exit code 2" in [s["description"] for s in statuses(webui)]


@pytest.mark.parametrize("tool", ["shell", "code"])
def test_open_webui_shows_a_command_that_exited_non_zero_as_a_failed_card_with_its_output(
    tool: str,
) -> None:
    report = "[exit code 2; 0.0 s]\nls: cannot access 'nope'"
    ran = dataclasses.replace(finished(name=tool), result_preview=report)

    frames, view = openwebui_stream(started(name=tool), ran, text("It failed."), end())

    done = [f for f in frames if f["type"] == "response.output_item.done"]
    calls = [f for f in done if f["item"]["type"] == "function_call"]
    # Done as any card is, then again, failed, when the command ended: Open WebUI replaces
    # the item at its index and draws it red.
    assert [(c["output_index"], c["item"]["status"]) for c in calls] == [
        (0, "completed"),
        (0, "failed"),
    ]
    assert calls[1]["item"] == {**calls[0]["item"], "status": "failed"}
    card, output, _ = items(view)
    assert card["status"] == "failed"  # as kept: what the Response (and its next turn) holds
    assert output["type"] == "function_call_output"
    assert output["output"] == [{"type": "input_text", "text": report}]  # all of it
    assert types(frames)[-1] == "response.completed"  # the run itself went well


def test_open_webui_shows_a_command_that_exited_zero_as_a_card_done_once() -> None:
    ran = dataclasses.replace(finished(name="shell"), result_preview="[exit code 0; 0.0 s]\nhi")

    frames, view = stream(started(name="shell"), ran, end(), progress="openwebui")

    assert [item["status"] for item in items(view)] == ["completed", "completed"]
    assert statuses(frames)[-2]["description"] == "shell done"


def test_openwebui_mode_keeps_the_models_reasoning_apart_from_tool_steps() -> None:
    _, view = stream(
        thought("Let me look."), started(), finished(), thought("Found it."), text("Zebra."),
        end(), progress="openwebui",
    )  # fmt: skip

    reasoning = [summaries(item) for item in items(view) if item["type"] == "reasoning"]
    assert reasoning == [["Let me look."], ["Found it."]]


def test_openwebui_mode_shows_a_retry_once_as_a_status_line() -> None:
    retry = RetryScheduled(RUN, 0, provider="sim", attempt=1, delay_s=1.5, reason="rate_limit")

    frames, view = stream(retry, text("Hi."), end(), progress="openwebui")

    assert statuses(frames)[0]["description"] == "sim failed (rate_limit); retrying in 1.5 s"
    assert [item["type"] for item in items(view)] == ["message"]


def test_openwebui_mode_answers_a_tool_still_running_at_the_end() -> None:
    frames, view = stream(started(), end(ExitReason.INTERRUPTED), progress="openwebui")
    last = items(view)[-1]
    assert last["type"] == "function_call_output"
    assert last["call_id"] == "call_1"
    assert last["output"] == [
        {"type": "input_text", "text": "Error: the run ended before this tool finished."}
    ]
    assert types(frames)[-1] == "response.incomplete"


def test_openwebui_mode_shows_no_cards_for_sub_agent_tools() -> None:
    inner = started("call_9", "grep")
    _, view = stream(
        SubagentEvent(run_id=RUN, seq=0, call_id="call_1", child_index=0, event=inner),
        end(),
        progress="openwebui",
    )
    assert items(view) == []  # the step is a status line


def test_a_refusal_streams_as_a_refusal_part_of_a_message_item() -> None:
    refused = dataclasses.replace(end(), refusal="I can't help with that.")

    frames, view = stream(refused)

    kinds = [f["type"] for f in frames]
    assert kinds[-7:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    (message,) = items(view)
    assert message["content"] == [{"type": "refusal", "refusal": "I can't help with that."}]


# --- a request's own MCP servers ------------------------------------------------------------

LAB = RemoteMcpTools(
    listings=[
        {
            "server_label": "lab",
            "tools": [{"name": "add", "input_schema": {"type": "object"}, "description": "Adds."}],
        }
    ],
    tools={"lab__add": RemoteTool("lab", "add", asks=False)},
)


def tool_message(call_id: str, content: str) -> MessageAdded:
    message: Any = {"role": "tool", "tool_call_id": call_id, "content": content}
    return MessageAdded(run_id=RUN, seq=0, index=2, message=message)


def test_a_request_mcp_server_is_listed_first_and_its_calls_are_mcp_call_items() -> None:
    frames, view = stream(
        started("call_1", "lab__add"),
        finished("call_1", "lab__add"),
        tool_message("call_1", "42 (the whole result, not a preview)"),
        text("It is 42."),
        end(),
        remote_mcp=LAB,
    )
    listing, call, message = items(view)
    assert listing["type"] == "mcp_list_tools"
    assert listing["server_label"] == "lab"
    assert [t["name"] for t in listing["tools"]] == ["add"]
    assert call["type"] == "mcp_call"
    assert (call["server_label"], call["name"]) == ("lab", "add")
    assert json.loads(call["arguments"]) == {"word": "zebra"}
    assert call["output"] == "42 (the whole result, not a preview)"
    assert message["type"] == "message"
    assert "response.mcp_call.completed" in types(frames)
    assert not any(
        "lab__add" in summary for item in items(view) for summary in item.get("summary", [])
    )


def test_a_request_mcp_call_awaiting_approval_is_an_approval_request_of_its_server() -> None:
    asking = RemoteMcpTools(LAB.listings, {"lab__add": RemoteTool("lab", "add", asks=True)})
    ask = ApprovalRequested(
        run_id=RUN,
        seq=0,
        approval_id="apr_1",
        call_id="call_1",
        name="lab__add",
        arguments={"word": "zebra"},
        reason="asked",
    )
    waiting = dataclasses.replace(
        finished("call_1", "lab__add"), outcome=ToolOutcome.AWAITING_APPROVAL
    )
    _, view = stream(
        started("call_1", "lab__add"), ask, waiting, end(ExitReason.AWAITING_APPROVAL),
        remote_mcp=asking,
    )  # fmt: skip
    kinds = [item["type"] for item in items(view)]
    assert kinds == ["mcp_list_tools", "mcp_approval_request"]
    request = items(view)[1]
    assert (request["id"], request["server_label"], request["name"]) == ("apr_1", "lab", "add")


def test_a_failed_request_mcp_call_carries_its_error() -> None:
    view = ResponsesView(make_shell(), completed_at=CREATED_AT, remote_mcp=LAB)
    frames = view.opening()
    for event in numbered(
        started("call_1", "lab__add"),
        finished("call_1", "lab__add", error="boom"),
        tool_message("call_1", "Error: boom"),
        end(),
    ):
        frames += view.handle(event)
    check_with_sdk(frames, view)
    call = items(view)[1]
    assert call["status"] == "failed"
    assert call["error"] == {"type": "mcp_tool_execution_error", "content": "Error: boom"}
    assert call["output"] is None
    assert "response.mcp_call.failed" in types(frames)


def test_a_request_mcp_call_cut_short_by_a_stop_is_incomplete() -> None:
    view = ResponsesView(make_shell(), completed_at=CREATED_AT, remote_mcp=LAB)
    frames = view.opening()
    for event in numbered(started("call_1", "lab__add"), end(ExitReason.INTERRUPTED)):
        frames += view.handle(event)
    check_with_sdk(frames, view)
    assert items(view)[1]["status"] == "incomplete"
