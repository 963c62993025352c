"""The chat view without HTTP: hand-built agent events in, whole ``chat.completion.chunk``
streams (and Open WebUI's extra frames) out; and the non-streaming completion builder.

Every chunk of every stream is also checked against the OpenAI SDK's own model.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

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
    ImagePartial,
    MessageAdded,
    ModelCallStarted,
    ReasoningDelta,
    RetryScheduled,
    RunFinished,
    RunStarted,
    Steered,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from hermes_core.usage import Usage
from server.views.chat import LINELESS_EVENTS, ChatCompletionBuilder, ChatStreamView

RUN = "run_1"
ID = "chatcmpl-1"
USAGE = Usage(input_tokens=100, cache_read_tokens=40, output_tokens=20, reasoning_tokens=5)


def started() -> RunStarted:
    return RunStarted(RUN, 0, task_id="t", model="m", provider="p", budget=10)


def tool_started(call_id: str = "c1", seq: int = 0) -> ToolStarted:
    return ToolStarted(
        RUN,
        seq,
        call_id=call_id,
        name="lookup",
        arguments={"word": "zebra"},
        summary="lookup zebra",
    )


def tool_finished(call_id: str = "c1", *, error: str | None = None) -> ToolFinished:
    outcome = ToolOutcome.SUCCESS if error is None else ToolOutcome.ERROR
    return ToolFinished(
        RUN,
        0,
        call_id=call_id,
        name="lookup",
        outcome=outcome,
        duration_s=0.012,
        result_preview="" if error else "a striped horse",
        error=error,
    )


def ended(reason: ExitReason = ExitReason.COMPLETED, *, error: str | None = None) -> RunFinished:
    return RunFinished(
        RUN,
        0,
        exit_reason=reason,
        final_text="Hi there.",
        iterations=2,
        usage=USAGE,
        model_calls=2,
        error=error,
        session_id="sess_1",
    )


def stream(*events: AgentEvent, **options: Any) -> list[dict[str, Any]]:
    """Every frame the view makes of ``events``; each chunk checked with the SDK's model."""
    view = ChatStreamView(completion_id=ID, model="hermes-agent", created=1, **options)
    frames: list[dict[str, Any]] = [dict(f) for event in events for f in view.handle(event)]
    for frame in frames:
        if "choices" in frame:
            ChatCompletionChunk.model_validate(frame)
    return frames


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": ID,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "hermes-agent",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }


HERMES = {
    "run_id": RUN,
    "session_id": "sess_1",
    "exit_reason": "completed",
    "iterations": 2,
    "model_calls": 2,
    "cost_usd": 0.0,
    "error": None,
}


def test_a_text_run_is_a_role_chunk_text_chunks_and_a_final_chunk_with_the_summary() -> None:
    frames = stream(
        started(), TextDelta(RUN, 1, text="Hi "), TextDelta(RUN, 2, text="there."), ended()
    )
    assert frames == [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hi "}),
        chunk({"content": "there."}),
        chunk({}, "stop", hermes=HERMES),
    ]


def test_usage_comes_last_in_a_chunk_of_its_own_when_asked_for() -> None:
    frames = stream(started(), ended(), include_usage=True)
    assert frames[0] == chunk({"role": "assistant", "content": ""}, usage=None)
    assert frames[-1] == {
        "id": ID,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "hermes-agent",
        "choices": [],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "prompt_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }


def test_reasoning_and_tool_steps_go_to_reasoning_content_never_to_content() -> None:
    frames = stream(
        ReasoningDelta(RUN, 1, text="Let me look."),
        tool_started(),
        tool_finished(),
        tool_finished("c2", error="Error: gone"),
    )
    assert frames == [
        chunk({"reasoning_content": "Let me look."}),
        chunk(
            {
                "reasoning_content": "→ lookup zebra\n",
                "hermes": {
                    "type": "tool",
                    "phase": "started",
                    "call_id": "c1",
                    "name": "lookup",
                    "arguments": {"word": "zebra"},
                },
            }
        ),
        chunk(
            {
                "reasoning_content": "✓ lookup (12 ms)\n",
                "hermes": {
                    "type": "tool",
                    "phase": "finished",
                    "call_id": "c1",
                    "name": "lookup",
                    "ok": True,
                    "outcome": "success",
                    "duration_ms": 12,
                    "preview": "a striped horse",
                    "error": None,
                },
            }
        ),
        chunk(
            {
                "reasoning_content": "✗ lookup (12 ms): Error: gone\n",
                "hermes": {
                    "type": "tool",
                    "phase": "finished",
                    "call_id": "c2",
                    "name": "lookup",
                    "ok": False,
                    "outcome": "error",
                    "duration_ms": 12,
                    "preview": "",
                    "error": "Error: gone",
                },
            }
        ),
    ]


def test_status_news_and_a_fallback_are_one_line_each() -> None:
    frames = stream(
        RetryScheduled(RUN, 1, provider="a", attempt=1, delay_s=1.5, reason="rate_limit"),
        FallbackActivated(RUN, 2, from_provider="a", to_provider="b", reason="rate_limit"),
        BudgetWarning(RUN, 3, tier="caution", used=7, total=10),
        CompressionPerformed(
            RUN,
            4,
            tokens_before=9000,
            tokens_after=3000,
            messages_before=40,
            messages_after=5,
            session_id="s.c1",
            parent_session_id="s",
            messages=[],
            summarised=True,
        ),
    )
    assert [f["choices"][0]["delta"] for f in frames if "choices" in f] == [
        {"reasoning_content": "· a failed (rate_limit); retrying in 1.5 s\n"},
        {"reasoning_content": "↪ a failed (rate_limit); continuing on b\n"},
        {"reasoning_content": "· Iteration budget: 7/10 used\n"},
        {"reasoning_content": "· Context compressed: 9000 → 3000 tokens\n"},
    ]


def test_events_that_change_nothing_visible_produce_no_frames() -> None:
    quiet: list[AgentEvent] = [
        ModelCallStarted(RUN, 1, iteration=1, provider="p", model="m"),
        ToolCallGenerating(RUN, 2, index=0, call_id="c", name="n", arguments_delta="{"),
        MessageAdded(RUN, 3, index=0, message={"role": "assistant", "content": "x"}),
        StepFinished(
            RUN, 4, iteration=1, usage=USAGE, provider="p", model="m", finish_reason="stop"
        ),
        Steered(RUN, 5, text="and also", applied=True),
        ImagePartial(RUN, 6, call_id="c", name="generate_image", index=0, image_b64="AA=="),
    ]
    assert stream(*quiet) == []
    # The non-streamed answer skips these kinds without asking the stream's view.
    assert {type(event) for event in quiet} == set(LINELESS_EVENTS) - {RunStarted, RunFinished}


def test_a_sub_agents_tool_steps_are_indented_and_numbered_and_its_text_is_not_shown() -> None:
    child = "run_child"
    events = (
        SubagentEvent(RUN, 1, call_id="d1", child_index=1, event=TextDelta(child, 0, text="x")),
        SubagentEvent(RUN, 2, call_id="d1", child_index=1, event=tool_started()),
    )
    plain = stream(*events)
    assert [f["choices"][0]["delta"]["reasoning_content"] for f in plain] == [
        "  ↳ [2] → lookup zebra\n"
    ]
    webui = stream(*events, openwebui=True)
    assert not [f for f in webui if f.get("type") == "response.output_item.added"]  # no card
    assert [f["event"]["data"] for f in webui if "event" in f] == [
        {"description": "↳ [2] lookup zebra", "done": True}
    ]


def test_open_webui_shows_a_tool_step_once_never_in_the_thought_block() -> None:
    frames = stream(tool_started("c1"), tool_finished("c1"), ended(), openwebui=True)

    deltas = [f["choices"][0]["delta"] for f in frames if f.get("choices")]
    assert not any("reasoning_content" in delta for delta in deltas)


@pytest.mark.parametrize(
    ("reason", "error", "last"),
    [
        (ExitReason.COMPLETED, None, "Done"),
        (ExitReason.INTERRUPTED, None, "Stopped"),
        (ExitReason.FAILED, "upstream down", "Failed: upstream down"),
    ],
)
def test_open_webuis_last_status_line_says_how_the_run_ended_and_is_done(
    reason: ExitReason, error: str | None, last: str
) -> None:
    retry = RetryScheduled(RUN, 1, provider="p", attempt=1, delay_s=1.8, reason="server_error")

    frames = stream(retry, tool_started("c1"), ended(reason, error=error), openwebui=True)

    statuses = [f["event"]["data"] for f in frames if "event" in f]
    assert statuses[-1] == {"description": last, "done": True}
    cards = [f["item"] for f in frames if f.get("type") == "response.output_item.added"]
    assert cards[-1]["type"] == "function_call_output"  # the running card is closed


def test_a_cancelled_tools_status_says_cancelled() -> None:
    cancelled = ToolFinished(
        RUN,
        1,
        call_id="c1",
        name="lookup",
        outcome=ToolOutcome.CANCELLED,
        duration_s=0.1,
        result_preview="",
        error="Cancelled: the run was interrupted while this tool was running.",
    )

    frames = stream(tool_started("c1"), cancelled, openwebui=True)

    assert [f["event"]["data"] for f in frames if "event" in f][-1] == {
        "description": "lookup cancelled",
        "done": True,
    }


def test_client_tool_calls_close_the_stream_with_finish_reason_tool_calls() -> None:
    call: Any = {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    end = RunFinished(
        RUN,
        2,
        exit_reason=ExitReason.AWAITING_CLIENT_TOOLS,
        final_text="",
        iterations=1,
        usage=USAGE,
        model_calls=1,
    )
    frames = stream(ClientToolCallsPending(RUN, 1, tool_calls=[call]), end)
    assert frames[0] == chunk({"tool_calls": [{"index": 0, **call}]})
    assert frames[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        (ExitReason.TRUNCATED, "length"),
        (ExitReason.BUDGET_EXHAUSTED, "length"),
        (ExitReason.INTERRUPTED, "length"),
    ],
)
def test_an_unfinished_run_never_ends_with_stop(reason: ExitReason, finish: str) -> None:
    (final,) = stream(ended(reason))
    assert final == chunk({}, finish, hermes={**HERMES, "exit_reason": reason.value})


def test_a_failed_run_ends_with_one_error_frame_in_the_envelope() -> None:
    (failure,) = stream(ended(ExitReason.FAILED, error="upstream broke"))
    assert failure == {
        "error": {
            "message": "upstream broke",
            "type": "server_error",
            "param": None,
            "code": "server_error",
        }
    }


def test_open_webui_gets_a_tool_card_and_status_lines_and_every_card_is_closed() -> None:
    frames = stream(
        tool_started("c1"), tool_finished("c1"), tool_started("c2"), ended(), openwebui=True
    )
    cards = [f for f in frames if f.get("type") == "response.output_item.added"]
    assert [(c["item"]["type"], c["item"]["call_id"]) for c in cards] == [
        ("function_call", "c1"),
        ("function_call_output", "c1"),
        ("function_call", "c2"),
        ("function_call_output", "c2"),  # closed by the ending, or Open WebUI runs the tool
    ]
    statuses = [f["event"]["data"] for f in frames if "event" in f]
    assert statuses == [
        {"description": "lookup zebra", "done": True},
        {"description": "lookup done", "done": True},
        {"description": "lookup zebra", "done": True},
        {"description": "Done", "done": True},
    ]


def test_a_running_tools_output_streams_in_delta_hermes_and_as_an_open_webui_status() -> None:
    progress = ToolProgress(RUN, 1, call_id="c1", name="lookup", output="step 1\nstep 2\n")

    plain = stream(tool_started("c1"), progress)
    webui = stream(tool_started("c1"), progress, openwebui=True)

    assert plain[-1]["choices"][0]["delta"] == {
        "hermes": {
            "type": "tool",
            "phase": "progress",
            "call_id": "c1",
            "name": "lookup",
            "output": "step 1\nstep 2\n",
        }
    }
    assert "content" not in plain[-1]["choices"][0]["delta"]
    assert webui[-1]["event"]["data"] == {"description": "lookup: step 2", "done": True}


def test_the_completion_builder_carries_the_answer_reasoning_client_calls_and_usage() -> None:
    builder = ChatCompletionBuilder(completion_id=ID, model="hermes-agent", created=1)
    call: Any = {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    for event in (
        ReasoningDelta(RUN, 1, text="hmm"),
        TextDelta(RUN, 2, text="Hi there."),
        ClientToolCallsPending(RUN, 3, tool_calls=[call]),
    ):
        builder.add(event)
    completion = builder.build(ended(ExitReason.AWAITING_CLIENT_TOOLS))
    ChatCompletion.model_validate(completion)
    assert completion["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Hi there.",
        "refusal": None,
        "annotations": [],
        "reasoning_content": "hmm",
        "tool_calls": [call],
    }
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert completion["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 40,
        "cache_write_tokens": 0,
    }
    assert completion["hermes"]["exit_reason"] == "awaiting_client_tools"


def test_a_tool_cards_output_is_json_laid_out_or_marked_where_it_is_cut() -> None:
    def card_output(preview: str, length: int) -> str:
        done = ToolFinished(
            RUN,
            1,
            call_id="c1",
            name="lookup",
            outcome=ToolOutcome.SUCCESS,
            duration_s=0.1,
            result_preview=preview,
            result_chars=length,
        )
        frames = stream(tool_started("c1"), done, openwebui=True)
        outputs = [f["item"] for f in frames if f.get("type") == "response.output_item.added"]
        text: str = outputs[-1]["output"][0]["text"]
        return text

    assert card_output('{"a":1,"b":[2]}', 15) == '{\n  "a": 1,\n  "b": [\n    2\n  ]\n}'
    assert card_output('{"a": "xxx', 5000) == '{"a": "xxx\n… [4990 more characters not shown]'
    assert card_output("plain words", 11) == "plain words"


def test_a_server_tools_card_is_renamed_when_the_client_has_a_tool_of_that_name() -> None:
    frames = stream(tool_started("c1"), openwebui=True, client_tool_names=frozenset({"lookup"}))

    (card,) = [f["item"] for f in frames if f.get("type") == "response.output_item.added"]
    assert card["name"] == "hermes_lookup"


def webui_statuses(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["event"]["data"] for f in frames if "event" in f]


def webui_cards(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["item"] for f in frames if f.get("type") == "response.output_item.added"]


def test_open_webui_shows_a_retry_or_fallback_once_as_a_status_line() -> None:
    retry = RetryScheduled(RUN, 1, provider="p", attempt=1, delay_s=1.5, reason="rate_limit")
    fallback = FallbackActivated(RUN, 2, from_provider="p", to_provider="q", reason="rate_limit")

    frames = stream(retry, fallback, openwebui=True)

    assert not [f for f in frames if "choices" in f]  # nothing in the Thought block
    assert webui_statuses(frames) == [
        {"description": "p failed (rate_limit); retrying in 1.5 s", "done": True},
        {"description": "p failed (rate_limit); continuing on q", "done": True},
    ]


def test_open_webui_repeats_no_status_line_the_same_as_the_one_before() -> None:
    progress = ToolProgress(RUN, 1, call_id="c1", name="lookup", output="step 2\n")

    frames = stream(tool_started("c1"), progress, progress, openwebui=True)

    assert [s["description"] for s in webui_statuses(frames)] == ["lookup zebra", "lookup: step 2"]


def test_a_delegate_task_card_shows_the_sub_agents_task() -> None:
    one = {"goal": "Count the  owls", "context": "in the park"}
    many = {"tasks": [{"goal": "Count owls"}, {"goal": "Count bats"}]}

    def card_input(arguments: dict[str, Any]) -> Any:
        started = ToolStarted(
            RUN, 1, call_id="d1", name="delegate_task", arguments=arguments, summary="d"
        )
        (card,) = webui_cards(stream(started, openwebui=True))
        return json.loads(card["arguments"])

    assert card_input(one) == {"task": "Count the owls", "context": "in the park"}
    assert card_input(many)["task"] == "1) Count owls | 2) Count bats"


def _ask(call_id: str = "c1") -> ApprovalRequested:
    return ApprovalRequested(
        RUN, 1, approval_id="apr_1", call_id=call_id, name="lookup",
        arguments={"word": "zebra"}, reason="looks things up",
    )  # fmt: skip


def _not_run(call_id: str, outcome: ToolOutcome, error: str) -> ToolFinished:
    return ToolFinished(
        RUN, 2, call_id=call_id, name="lookup", outcome=outcome, duration_s=0.0,
        result_preview=error, error=error,
    )  # fmt: skip


def test_open_webui_shows_an_approval_question_as_a_status_line_and_a_card_that_is_no_failure() -> (
    None
):
    waits = _not_run("c1", ToolOutcome.AWAITING_APPROVAL, "Not run yet: this call waits …")
    question = TextDelta(RUN, 3, text="I need your approval before I go on: …")

    frames = stream(
        tool_started("c1"), _ask(), waits, question, ended(ExitReason.AWAITING_APPROVAL),
        openwebui=True,
    )  # fmt: skip

    (output,) = [c for c in webui_cards(frames) if c["type"] == "function_call_output"]
    assert not output["output"][0]["text"].startswith("Error")
    asked = "lookup needs your approval: looks things up — reply approve or deny"
    assert webui_statuses(frames)[-1] == {"description": asked, "done": True}
    assert "lookup failed" not in str(webui_statuses(frames))
    deltas = [f["choices"][0]["delta"] for f in frames if f.get("choices")]
    assert not any("reasoning_content" in delta for delta in deltas)


def test_open_webui_shows_a_call_denied_in_an_earlier_turn_as_denied_never_running() -> None:
    denied = ApprovalResolved(
        RUN, 1, approval_id="apr_1", call_id="c1", name="lookup", decision=ApprovalDecision.DENIED
    )
    refused = _not_run("c1", ToolOutcome.DENIED, "Denied by the user: lookup did not run.")

    frames = stream(denied, tool_started("c1"), refused, ended(), openwebui=True)

    call, output = webui_cards(frames)
    assert call["status"] == "rejected"  # Open WebUI: "Denied lookup"
    assert output["output"][0]["text"] == "Denied by the user: lookup did not run."
    assert [s["description"] for s in webui_statuses(frames)] == [
        "lookup denied by the user: it did not run",
        "Done",
    ]


def _command(preview: str, name: str = "shell") -> tuple[ToolStarted, ToolFinished]:
    """A command that ran (the tool call succeeded, the model reads it all) and how it ended."""
    started = ToolStarted(
        RUN, 0, call_id="c1", name=name, arguments={"command": "ls nope"}, summary="ls nope"
    )
    finished = ToolFinished(
        RUN, 1, call_id="c1", name=name, outcome=ToolOutcome.SUCCESS, duration_s=0.012,
        result_preview=preview, result_chars=len(preview),
    )  # fmt: skip
    return started, finished


NO_SUCH_FILE = "[exit code 2; 0.0 s]\nls: cannot access 'nope': No such file or directory"


@pytest.mark.parametrize("tool", ["shell", "code"])
def test_open_webui_shows_a_command_that_exited_non_zero_as_a_failed_card_with_its_output(
    tool: str,
) -> None:
    frames = stream(*_command(NO_SUCH_FILE, tool), ended(), openwebui=True)

    running, failed, output = webui_cards(frames)
    assert (running["type"], running["status"]) == ("function_call", "completed")  # running
    # The same item again (Open WebUI replaces it by id), now failed: its card is drawn red.
    assert failed == {**running, "status": "failed"}
    assert output["type"] == "function_call_output"
    assert output["output"] == [{"type": "input_text", "text": NO_SUCH_FILE}]  # all of it
    said = [s["description"] for s in webui_statuses(frames)]
    assert f"{tool} failed: exit code 2" in said
    assert f"{tool} done" not in said


@pytest.mark.parametrize(
    ("preview", "ending"),
    [
        ("[timed out after 5 s and was killed; 5.0 s]\n[no output]", "timed out"),
        ("[killed by signal 9; 0.3 s]\n[no output]", "killed by signal 9"),
    ],
)
def test_a_command_that_was_killed_is_a_failed_step(preview: str, ending: str) -> None:
    started, finished = _command(preview)

    plain = stream(started, finished)
    webui = stream(started, finished, openwebui=True)

    assert plain[-1]["choices"][0]["delta"]["reasoning_content"] == f"✗ shell (12 ms): {ending}\n"
    assert plain[-1]["choices"][0]["delta"]["hermes"]["ok"] is True  # the call itself ran
    assert [c.get("status") for c in webui_cards(webui)] == ["completed", "failed", "completed"]


def test_a_command_that_exited_zero_is_a_done_step_and_a_completed_card() -> None:
    started, finished = _command("[exit code 0; 0.0 s]\nhello")

    plain = stream(started, finished)
    webui = stream(started, finished, openwebui=True)

    assert plain[-1]["choices"][0]["delta"]["reasoning_content"] == "✓ shell (12 ms)\n"
    assert [c.get("status") for c in webui_cards(webui)] == ["completed", "completed"]
    assert webui_statuses(webui)[-1]["description"] == "shell done"
