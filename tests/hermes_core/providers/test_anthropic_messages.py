"""The anthropic_messages adapter: stream parsing, request conversion and reasoning replay.

Behaviour every adapter shares (streaming over HTTP, errors, timeouts, cancellation, usage) is
tested for all three in ``test_adapter_contract.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import (
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
)
from pydantic import SecretStr

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ForcedTool,
    ModelReasoningDelta,
    ModelRequest,
    ModelTextDelta,
    ToolCallDelta,
    ToolChoice,
    ToolSchema,
)
from hermes_core.providers._anthropic_convert import (
    build_kwargs,
    to_wire_messages,
    to_wire_tool_choice,
)
from hermes_core.providers.anthropic_messages import (
    REFUSED,
    AnthropicMessagesProvider,
    AnthropicStreamAccumulator,
)
from hermes_core.providers.config import ProviderConfig
from hermes_core.usage import Usage
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final, user

_EVENT_TYPES: dict[str, Any] = {
    "message_start": RawMessageStartEvent,
    "content_block_start": RawContentBlockStartEvent,
    "content_block_delta": RawContentBlockDeltaEvent,
    "content_block_stop": RawContentBlockStopEvent,
    "message_delta": RawMessageDeltaEvent,
    "message_stop": RawMessageStopEvent,
}


def _event(raw: dict[str, Any]) -> RawMessageStreamEvent:
    event: RawMessageStreamEvent = _EVENT_TYPES[raw["type"]].model_validate(raw)
    return event


def _start(input_tokens: int = 10, read: int = 0, write: int = 0) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
    }
    message: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant",
                               "model": "claude-x", "content": [], "stop_reason": None,
                               "stop_sequence": None, "usage": usage}  # fmt: skip
    return {"type": "message_start", "message": message}


def _block(index: int, block: dict[str, Any], *deltas: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": block},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def _end(stop_reason: str = "end_turn", output_tokens: int = 20) -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
         "usage": {"output_tokens": output_tokens}},
        {"type": "message_stop"},
    ]  # fmt: skip


def _tool_use(index: int, call_id: str, name: str, *pieces: str) -> list[dict[str, Any]]:
    deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
    return _block(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}, *deltas)


def _run(*raw: dict[str, Any]) -> tuple[list[Any], AnthropicStreamAccumulator]:
    acc = AnthropicStreamAccumulator()
    return [out for r in raw for out in acc.feed(_event(r))], acc


def _script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


# --- the accumulator, on literal events ---------------------------------------------------------


def test_accumulator_turns_thinking_text_and_tool_use_into_provider_events() -> None:
    events, acc = _run(
        _start(),
        *_block(0, {"type": "thinking", "thinking": "", "signature": ""},
                {"type": "thinking_delta", "thinking": "Hmm, "},
                {"type": "thinking_delta", "thinking": "a file."},
                {"type": "signature_delta", "signature": "sig-1"}),
        *_block(1, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Reading."}),
        *_tool_use(2, "toolu_1", "read_file", "", '{"path":', ' "a"}'),
        *_end("tool_use"),
    )  # fmt: skip
    assert events == [
        ModelReasoningDelta(text="Hmm, "),
        ModelReasoningDelta(text="a file."),
        ModelTextDelta(text="Reading."),
        ToolCallDelta(index=0, id="toolu_1", name="read_file"),
        ToolCallDelta(index=0, arguments='{"path":'),
        ToolCallDelta(index=0, arguments=' "a"}'),
    ]
    response = acc.finish(provider="p", model="fallback")
    assert response.message == {
        "role": "assistant",
        "content": "Reading.",
        "tool_calls": [{"id": "toolu_1", "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a"}'}}],
        "reasoning": "Hmm, a file.",
        "reasoning_replay": {"api_mode": "anthropic_messages", "items": [
            {"type": "thinking", "thinking": "Hmm, a file.", "signature": "sig-1"}]},
    }  # fmt: skip
    assert response.finish_reason == "tool_calls"
    assert response.model == "claude-x"


def test_accumulator_numbers_tool_calls_among_tool_use_blocks_only() -> None:
    events, acc = _run(
        _start(),
        *_block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Two calls."}),
        *_tool_use(1, "toolu_a", "f", '{"x":1}'),
        *_tool_use(2, "toolu_b", "g"),
        *_end("tool_use"),
    )
    starts = [e for e in events if isinstance(e, ToolCallDelta) and e.id]
    assert [(e.index, e.id) for e in starts] == [(0, "toolu_a"), (1, "toolu_b")]
    calls = acc.finish(provider="p", model="m").message["tool_calls"]
    # A call streamed without any input JSON still carries a valid arguments object.
    assert [c["function"]["arguments"] for c in calls] == ['{"x":1}', "{}"]


def test_accumulator_keeps_redacted_thinking_for_replay() -> None:
    _, acc = _run(
        _start(),
        *_block(0, {"type": "redacted_thinking", "data": "opaque=="}),
        *_block(1, {"type": "text", "text": ""}, {"type": "text_delta", "text": "ok"}),
        *_end(),
    )
    message = acc.finish(provider="p", model="m").message
    assert message["reasoning_replay"] == {
        "api_mode": "anthropic_messages",
        "items": [{"type": "redacted_thinking", "data": "opaque=="}],
    }
    assert "reasoning" not in message


def test_accumulator_counts_cache_reads_and_writes_as_input() -> None:
    _, acc = _run(
        _start(input_tokens=10, read=100, write=50),
        *_block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "ok"}),
        *_end(output_tokens=30),
    )
    assert acc.finish(provider="p", model="m").usage == Usage(
        input_tokens=160, cache_read_tokens=100, cache_write_tokens=50, output_tokens=30
    )


def test_message_delta_usage_replaces_the_cumulative_counts() -> None:
    usage = {"output_tokens": 7, "input_tokens": 12, "cache_read_input_tokens": 3}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}
    _, acc = _run(_start(input_tokens=10, write=5), delta, {"type": "message_stop"})
    assert acc.finish(provider="p", model="m").usage == Usage(
        input_tokens=20, cache_read_tokens=3, cache_write_tokens=5, output_tokens=7
    )


def test_reasoning_tokens_are_an_estimate_capped_at_output_tokens() -> None:
    thinking = _block(0, {"type": "thinking", "thinking": "x" * 400, "signature": "s"})
    _, generous = _run(_start(), *thinking, *_end(output_tokens=500))
    _, stingy = _run(_start(), *thinking, *_end(output_tokens=30))
    assert generous.finish(provider="p", model="m").usage.reasoning_tokens == 100
    assert stingy.finish(provider="p", model="m").usage.reasoning_tokens == 30


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
    ],
)
def test_stop_reason_maps_to_finish_reason(stop_reason: str, finish: str) -> None:
    _, acc = _run(_start(), *_end(stop_reason))
    assert acc.finish(provider="p", model="m").finish_reason == finish


def test_a_refusal_stop_with_no_text_is_the_messages_refusal() -> None:
    _, acc = _run(_start(), *_end("refusal"))

    message = acc.finish(provider="p", model="m").message

    assert message.get("refusal") == REFUSED
    assert message["content"] is None


def test_accumulator_refuses_a_stream_without_message_stop() -> None:
    _, acc = _run(
        _start(), *_block(0, {"type": "text", "text": ""}, {"type": "text_delta", "text": "hal"})
    )
    with pytest.raises(ProviderError) as caught:
        acc.finish(provider="p", model="m")
    assert caught.value.kind is ErrorKind.CONNECTION


# --- conversion to the wire ---------------------------------------------------------------------


def _call(call_id: str, name: str = "f", arguments: str = "{}") -> Any:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_leading_system_messages_become_system_blocks() -> None:
    system, turns = to_wire_messages([
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": [{"type": "text", "text": "Use tools."}]},
        {"role": "user", "content": "hi"},
    ])  # fmt: skip
    assert system == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}]
    assert turns == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_parallel_tool_results_form_one_user_turn_with_the_next_user_text() -> None:
    _, turns = to_wire_messages([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("t1", "f", '{"a": 1}'), _call("t2", "g", "{not json")]},
        {"role": "tool", "tool_call_id": "t1", "content": "one"},
        {"role": "tool", "tool_call_id": "t2", "content": "two"},
        {"role": "user", "content": "and now?"},
    ])  # fmt: skip
    assert turns[1] == {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
            {"type": "tool_use", "id": "t2", "name": "g", "input": {}},
        ],
    }
    assert turns[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "two"},
            {"type": "text", "text": "and now?"},
        ],
    }
    assert len(turns) == 3


def test_consecutive_same_role_messages_are_merged_and_empty_turns_dropped() -> None:
    _, turns = to_wire_messages([
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "three"},
    ])  # fmt: skip
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["text"] for b in turns[0]["content"]] == ["one", "two"]
    assert [b["text"] for b in turns[1]["content"]] == ["a", "b"]


def _assistant_with_replay(api_mode: str) -> Message:
    items = [{"type": "thinking", "thinking": "plan", "signature": "sig"},
             {"type": "redacted_thinking", "data": "xyz"}]  # fmt: skip
    return {"role": "assistant", "content": "Done.", "reasoning": "plan",
            "reasoning_replay": {"api_mode": api_mode, "items": items}}  # fmt: skip


def test_thinking_replay_is_sent_back_verbatim_for_anthropic() -> None:
    _, turns = to_wire_messages(
        [user("q").messages[0], _assistant_with_replay("anthropic_messages")]
    )
    assert turns[1]["content"] == [
        {"type": "thinking", "thinking": "plan", "signature": "sig"},
        {"type": "redacted_thinking", "data": "xyz"},
        {"type": "text", "text": "Done."},
    ]


def test_thinking_replay_from_another_api_mode_is_dropped() -> None:
    _, turns = to_wire_messages([user("q").messages[0], _assistant_with_replay("codex_responses")])
    assert turns[1]["content"] == [{"type": "text", "text": "Done."}]


def test_image_parts_become_image_blocks() -> None:
    _, turns = to_wire_messages([{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]}])  # fmt: skip
    assert turns[0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]


@pytest.mark.parametrize(
    ("choice", "parallel", "wire"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", None, {"type": "any"}),
        ("none", False, {"type": "none"}),
        (ForcedTool(name="f"), None, {"type": "tool", "name": "f"}),
        ("auto", False, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_tool_choice_maps_to_anthropic(
    choice: ToolChoice, parallel: bool | None, wire: dict[str, Any]
) -> None:
    assert to_wire_tool_choice(choice, parallel) == wire


def test_build_kwargs_sends_tools_and_the_configured_max_tokens() -> None:
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[ToolSchema(name="f", description="does f")],
        temperature=0.2,
    )
    kwargs = build_kwargs(request, model="claude-x", default_max_tokens=777)
    assert kwargs["max_tokens"] == 777
    assert kwargs["temperature"] == 0.2
    assert kwargs["tools"] == [{"name": "f", "description": "does f",
                                "input_schema": {"type": "object", "properties": {}}}]  # fmt: skip
    assert kwargs["tool_choice"] == {"type": "auto"}
    assert "thinking" not in kwargs


def test_reasoning_effort_enables_thinking_above_the_budget() -> None:
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}], reasoning_effort="medium", max_tokens=1000
    )
    kwargs = build_kwargs(request, model="claude-x", default_max_tokens=4096)
    assert kwargs["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert kwargs["max_tokens"] == 5096


@pytest.mark.parametrize("choice", ["required", ForcedTool(name="f")])
def test_a_forced_tool_choice_turns_thinking_off(choice: ToolChoice) -> None:
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[ToolSchema(name="f")],
        tool_choice=choice,
        reasoning_effort="high",
    )
    assert "thinking" not in build_kwargs(request, model="claude-x", default_max_tokens=4096)


def test_cache_marker_hook_sees_the_body_and_its_result_is_sent() -> None:
    seen: list[dict[str, Any]] = []

    def mark_system(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        system = [{**block, "cache_control": {"type": "ephemeral"}} for block in body["system"]]
        return {**body, "system": system}

    request = ModelRequest(messages=[{"role": "system", "content": "S"}, *user("hi").messages])
    kwargs = build_kwargs(request, model="m", default_max_tokens=10, cache_markers=mark_system)
    assert set(seen[0]) == {"system", "messages"}
    assert kwargs["system"] == [
        {"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}
    ]


def test_conversion_leaves_the_caller_history_untouched() -> None:
    history: list[Message] = [
        {"role": "user", "content": "go"},
        _assistant_with_replay("anthropic_messages"),
        {"role": "user", "content": "more"},
    ]
    snapshot = repr(history)
    _, turns = to_wire_messages(history)
    turns[1]["content"][0]["signature"] = "changed"
    assert repr(history) == snapshot


# --- against the simulator over HTTP ----------------------------------------------------------


async def test_thinking_streams_and_its_replay_passes_the_signature_check(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    call = ToolCallSpec(name="lookup", arguments={"q": "x"}, id="toolu_1")
    _script(
        simulator,
        "thinker",
        Step(reply=Reply(reasoning="I need to look it up.", tool_calls=[call])),
        Step(reply=Reply(text="Found it.")),
    )
    provider = make_provider("anthropic_messages", "thinker")
    history: list[Message] = [{"role": "user", "content": "find x"}]
    request = ModelRequest(
        messages=history, tools=[ToolSchema(name="lookup")], reasoning_effort="low"
    )
    events = await collect(provider, request)
    assert (
        "".join(e.text for e in events if isinstance(e, ModelReasoningDelta))
        == "I need to look it up."
    )
    first = final(events)
    assert first.message["reasoning"] == "I need to look it up."
    assert first.usage.reasoning_tokens > 0
    history += [first.message, {"role": "tool", "tool_call_id": "toolu_1", "content": "x=1"}]
    second = final(await collect(provider, ModelRequest(messages=history, reasoning_effort="low")))
    assert second.message["content"] == "Found it."
    replayed = simulator.state.requests(scenario="thinker")[1].body["messages"][1]["content"][0]
    assert replayed["type"] == "thinking"
    assert replayed["signature"]


async def test_an_edited_thinking_signature_is_an_invalid_request(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "edited", Step(reply=Reply(reasoning="Plan.", text="Done.")))
    provider = make_provider("anthropic_messages", "edited")
    first = final(await collect(provider, user("go")))
    tampered = first.message.copy()
    tampered["reasoning_replay"] = {"api_mode": "anthropic_messages", "items": [
        {"type": "thinking", "thinking": "Plan (edited).", "signature": "x"}]}  # fmt: skip
    history: list[Message] = [user("go").messages[0], tampered, user("again").messages[0]]
    with pytest.raises(ProviderError) as caught:
        await collect(provider, ModelRequest(messages=history))
    assert caught.value.kind is ErrorKind.INVALID_REQUEST
    assert "Invalid `signature`" in str(caught.value)


def _mark_system(body: dict[str, Any]) -> dict[str, Any]:
    system = [{**block, "cache_control": {"type": "ephemeral"}} for block in body["system"]]
    return {**body, "system": system}


async def test_usage_counts_cache_reads_and_writes_in_input_tokens(
    simulator: SimulatorServer,
) -> None:
    config = ProviderConfig(name="sim-cache", model="claude-sim", api_mode="anthropic_messages",
                            base_url=simulator.base_url, api_key=SecretStr("test"))  # fmt: skip
    provider = AnthropicMessagesProvider(config, cache_markers=_mark_system)
    try:
        system: Message = {"role": "system", "content": "You are careful and thorough. " * 40}
        first = final(await collect(provider, ModelRequest(messages=[system, *user("a").messages])))
        second = final(
            await collect(provider, ModelRequest(messages=[system, *user("b").messages]))
        )
    finally:
        await provider.aclose()
    wire = simulator.state.requests()[0].body
    assert wire["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert first.usage.cache_write_tokens > 0
    assert first.usage.cache_read_tokens == 0
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    assert second.usage.cache_write_tokens == 0
    # Normalised: the whole prompt, so both calls count the same input tokens.
    assert first.usage.input_tokens == second.usage.input_tokens
    assert first.usage.input_tokens > first.usage.cache_write_tokens
