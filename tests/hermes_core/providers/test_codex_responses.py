"""The codex_responses adapter: stream parsing, request conversion and reasoning replay.

Behaviour every adapter shares (streaming over HTTP, errors, timeouts, cancellation, usage) is
tested for all three in ``test_adapter_contract.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ForcedTool,
    ModelReasoningDelta,
    ModelRequest,
    ModelTextDelta,
    ProviderEvent,
    ToolCallDelta,
    ToolSchema,
)
from hermes_core.providers.codex_responses import (
    ResponsesStreamAccumulator,
    build_kwargs,
    to_input,
)
from hermes_core.usage import Usage
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final

_EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def _response(status: str = "completed", **fields: Any) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "created_at": 0, "model": "m", "status": status,
        "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], **fields,
    }  # fmt: skip


def _feed(acc: ResponsesStreamAccumulator, *events: dict[str, Any]) -> list[ProviderEvent]:
    """Feed literal wire events (sequence numbers added) and collect what comes out."""
    out: list[ProviderEvent] = []
    for n, event in enumerate(events):
        out += acc.feed(_EVENTS.validate_python({"sequence_number": n, **event}))
    return out


def _completed(**fields: Any) -> dict[str, Any]:
    return {"type": "response.completed", "response": _response(**fields)}


def _call_added(output_index: int, item_id: str, call_id: str, name: str) -> dict[str, Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": "", "status": "in_progress"}  # fmt: skip
    return {"type": "response.output_item.added", "output_index": output_index, "item": item}


def _args(output_index: int, item_id: str, delta: str) -> dict[str, Any]:
    return {"type": "response.function_call_arguments.delta", "item_id": item_id,
            "output_index": output_index, "delta": delta}  # fmt: skip


def _script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


# --- the accumulator, on literal events ----------------------------------------------------------


def test_accumulator_streams_text_and_assembles_the_message() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0, "logprobs": []}
    events = _feed(
        acc,
        {"type": "response.created", "response": _response("in_progress")},
        {"type": "response.output_text.delta", **where, "delta": "Hel"},
        {"type": "response.output_text.delta", **where, "delta": "lo"},
        {"type": "response.output_text.done", **where, "text": "Hello"},
        _completed(),
    )
    assert events == [ModelTextDelta(text="Hel"), ModelTextDelta(text="lo")]
    response = acc.finish(model="fallback")
    assert response.message == {"role": "assistant", "content": "Hello"}
    assert (response.finish_reason, response.model, response.provider) == ("stop", "m", "p")


def test_accumulator_fills_in_text_a_server_sent_only_in_done_events() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0, "logprobs": []}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Hello, you", "annotations": []}],
    }
    events = _feed(
        acc,
        {"type": "response.output_text.delta", **where, "delta": "Hel"},
        {"type": "response.output_text.done", **where, "text": "Hello"},
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        _completed(),
    )  # fmt: skip
    assert events == [
        ModelTextDelta(text="Hel"),
        ModelTextDelta(text="lo"),
        ModelTextDelta(text=", you"),
    ]
    assert acc.finish(model="m").message["content"] == "Hello, you"


def test_accumulator_turns_reasoning_summaries_into_reasoning_and_a_replay() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    part = {"item_id": "rs_1", "output_index": 0}
    item = {"type": "reasoning", "id": "rs_1", "encrypted_content": "opaque",
            "summary": [{"type": "summary_text", "text": "First."},
                        {"type": "summary_text", "text": "Then."}]}  # fmt: skip
    events = _feed(
        acc,
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "summary": []}},
        {"type": "response.reasoning_summary_text.delta", **part, "summary_index": 0,
         "delta": "First."},
        {"type": "response.reasoning_summary_text.delta", **part, "summary_index": 1,
         "delta": "Then."},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        _completed(),
    )  # fmt: skip
    assert events == [ModelReasoningDelta(text="First."), ModelReasoningDelta(text="\n\nThen.")]
    message = acc.finish(model="m").message
    assert message["reasoning"] == "First.\n\nThen."
    assert message["reasoning_replay"] == {"api_mode": "codex_responses", "items": [item]}
    assert message["content"] is None


def test_accumulator_numbers_parallel_calls_by_their_position_among_calls() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    events = _feed(
        acc,
        _call_added(1, "fc_a", "call_a", "f"),  # output 0 is, say, a message
        _call_added(2, "fc_b", "call_b", "g"),
        _args(1, "fc_a", '{"x":'),
        _args(2, "fc_b", "{}"),
        _args(1, "fc_a", "1}"),
        _completed(),
    )
    assert events == [
        ToolCallDelta(index=0, id="call_a", name="f", arguments=""),
        ToolCallDelta(index=1, id="call_b", name="g", arguments=""),
        ToolCallDelta(index=0, arguments='{"x":'),
        ToolCallDelta(index=1, arguments="{}"),
        ToolCallDelta(index=0, arguments="1}"),
    ]
    response = acc.finish(model="m")
    assert response.finish_reason == "tool_calls"
    assert response.message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]


def test_tool_call_arguments_survive_as_sent() -> None:
    # Malformed arguments are the agent's problem, not the parser's: they pass through verbatim.
    acc = ResponsesStreamAccumulator(provider="p")
    _feed(acc, _call_added(0, "fc", "c", "f"), _args(0, "fc", '{"broken'), _completed())
    [call] = acc.finish(model="m").message["tool_calls"]
    assert call["function"]["arguments"] == '{"broken'
    with pytest.raises(json.JSONDecodeError):
        json.loads(call["function"]["arguments"])


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
def test_accumulator_maps_an_incomplete_response_to_its_finish_reason(
    reason: str, finish: str
) -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    _feed(
        acc,
        _call_added(0, "fc_a", "call_a", "f"),
        _args(0, "fc_a", '{"x":'),
        {"type": "response.incomplete",
         "response": _response("incomplete", incomplete_details={"reason": reason})},
    )  # fmt: skip
    # Truncation outranks the tool call: its arguments may be cut off.
    assert acc.finish(model="m").finish_reason == finish


def test_accumulator_normalises_usage_with_cache_and_reasoning() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 8},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": 130,
    }
    _feed(acc, _completed(usage=usage))
    assert acc.finish(model="m").usage == Usage(
        input_tokens=100,
        cache_read_tokens=64,
        cache_write_tokens=8,
        output_tokens=30,
        reasoning_tokens=10,
    )


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("rate_limit_exceeded", ErrorKind.RATE_LIMIT),
        ("server_error", ErrorKind.SERVER_ERROR),
        ("something_new", ErrorKind.SERVER_ERROR),
    ],
)
def test_accumulator_raises_on_an_error_event(code: str, kind: ErrorKind) -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    with pytest.raises(ProviderError) as caught:
        _feed(acc, {"type": "error", "code": code, "message": "boom", "param": None})
    assert caught.value.kind is kind
    assert caught.value.provider == "p"


def test_accumulator_raises_on_a_failed_response() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    failed = _response("failed", error={"code": "rate_limit_exceeded", "message": "slow down"})
    with pytest.raises(ProviderError) as caught:
        _feed(acc, {"type": "response.failed", "response": failed})
    assert caught.value.kind is ErrorKind.RATE_LIMIT
    assert "slow down" in str(caught.value)


def test_accumulator_refuses_a_stream_without_a_terminal_event() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    _feed(acc, {"type": "response.created", "response": _response("in_progress")})
    with pytest.raises(ProviderError) as caught:
        acc.finish(model="m")
    assert caught.value.kind is ErrorKind.CONNECTION


# --- request conversion ---------------------------------------------------------------------------


def test_build_kwargs_maps_tools_choice_and_options() -> None:
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[ToolSchema(name="f", description="does f")],
        tool_choice=ForcedTool(name="f"),
        parallel_tool_calls=False,
        max_tokens=100,
        temperature=0.5,
        reasoning_effort="high",
    )
    kwargs = build_kwargs(request, model="m")
    assert kwargs["tools"] == [
        {"type": "function", "name": "f", "description": "does f",
         "parameters": {"type": "object", "properties": {}}, "strict": False}
    ]  # fmt: skip
    assert kwargs["tool_choice"] == {"type": "function", "name": "f"}
    assert kwargs["parallel_tool_calls"] is False
    assert kwargs["max_output_tokens"] == 100
    assert kwargs["temperature"] == 0.5
    assert kwargs["reasoning"] == {"effort": "high", "summary": "auto"}
    assert kwargs["store"] is False
    assert kwargs["stream"] is True
    assert "instructions" not in kwargs


def test_to_input_replays_only_reasoning_items_this_adapter_issued() -> None:
    ours = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}
    history: list[Message] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "one",
         "reasoning_replay": {"api_mode": "codex_responses", "items": [ours]}},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "two",
         "reasoning_replay": {"api_mode": "anthropic_messages", "items": [{"type": "thinking"}]}},
    ]  # fmt: skip
    _, items = to_input(history)
    assert [item["type"] for item in items] == [
        "message", "reasoning", "message", "message", "message"
    ]  # fmt: skip
    assert items[1] == ours


def test_to_input_converts_content_parts() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    _, items = to_input([{"role": "user", "content": [{"type": "text", "text": "see"}, image]}])
    assert items == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "see"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
        ]}
    ]  # fmt: skip


# --- against the simulator over HTTP ------------------------------------------------------------


async def test_messages_convert_to_responses_items(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "convert", Step(reply=Reply(text="Sunny it is.")))
    history: list[Message] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Checking.",
         "tool_calls": [{"id": "call_w", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_w", "content": "Sunny"},
    ]  # fmt: skip
    request = ModelRequest(messages=history, tools=[ToolSchema(name="get_weather")])
    response = final(await collect(make_provider("codex_responses", "convert"), request))
    assert response.message["content"] == "Sunny it is."
    sent = simulator.state.requests(scenario="convert")[0].body
    assert sent["instructions"] == "Be brief."
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": "Weather in Oslo?"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "call_id": "call_w", "name": "get_weather",
         "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_w", "output": "Sunny"},
    ]  # fmt: skip
    assert sent["tools"] == [
        {"type": "function", "name": "get_weather", "description": "",
         "parameters": {"type": "object", "properties": {}}, "strict": False}
    ]  # fmt: skip
    assert sent["store"] is False


async def test_reasoning_items_are_replayed_on_the_next_call(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "replay", Step(reply=Reply(reasoning="Hmm.", text="A."), repeat=2))
    provider = make_provider("codex_responses", "replay")
    history: list[Message] = [{"role": "user", "content": "q1"}]
    first = final(await collect(provider, ModelRequest(messages=history)))
    history += [first.message, {"role": "user", "content": "q2"}]
    final(await collect(provider, ModelRequest(messages=history)))
    sent = simulator.state.requests(scenario="replay")[1].body["input"]
    assert [item["type"] for item in sent] == ["message", "reasoning", "message", "message"]
    assert sent[1]["id"] == "rs_sim0"


def test_a_refusal_part_becomes_the_messages_refusal() -> None:
    acc = ResponsesStreamAccumulator(provider="p")
    item = {
        "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "refusal", "refusal": "I can't help with that."}],
    }  # fmt: skip
    _feed(acc, {"type": "response.output_item.done", "output_index": 0, "item": item})
    _feed(acc, _completed(output=[item]))

    message = acc.finish(model="m").message

    assert message.get("refusal") == "I can't help with that."
    assert message["content"] is None
