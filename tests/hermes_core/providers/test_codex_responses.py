"""The codex_responses adapter: stream parsing, conversion, errors and cancellation."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ForcedTool,
    ModelRequest,
    ProviderEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSchema,
)
from hermes_core.providers.codex_responses import (
    ResponsesStreamAccumulator,
    build_kwargs,
    to_input,
)
from hermes_core.usage import Usage
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final, user

_EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)
PROVIDER = "sim-codex_responses"


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
    assert events == [TextDelta(text="Hel"), TextDelta(text="lo")]
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
    assert events == [TextDelta(text="Hel"), TextDelta(text="lo"), TextDelta(text=", you")]
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
    assert events == [ReasoningDelta(text="First."), ReasoningDelta(text="\n\nThen.")]
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


async def test_plain_text_streams_as_text_deltas(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "plain", Step(reply=Reply(text="Hello there, world!", chunk_count=3)))
    events = await collect(make_provider("codex_responses", "plain"), user("hi"))
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta(text="Hello t"), TextDelta(text="here, "), TextDelta(text="world!")
    ]  # fmt: skip
    response = final(events)
    assert response.message == {"role": "assistant", "content": "Hello there, world!"}
    assert (response.finish_reason, response.provider, response.model) == (
        "stop",
        PROVIDER,
        "plain",
    )
    assert simulator.state.requests(scenario="plain")[0].path == "/v1/responses"


async def test_reasoning_summary_becomes_reasoning_deltas(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "thinker", Step(reply=Reply(reasoning="First, think.", text="42")))
    request = ModelRequest(messages=[{"role": "user", "content": "?"}], reasoning_effort="low")
    events = await collect(make_provider("codex_responses", "thinker"), request)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "First, think."
    response = final(events)
    assert response.message["reasoning"] == "First, think."
    replay = response.message["reasoning_replay"]
    assert replay["api_mode"] == "codex_responses"
    assert [item["type"] for item in replay["items"]] == ["reasoning"]
    assert response.usage.reasoning_tokens > 0
    sent = simulator.state.requests(scenario="thinker")[0].body
    assert sent["reasoning"] == {"effort": "low", "summary": "auto"}


async def test_single_tool_call_is_assembled(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    call = ToolCallSpec(name="read_file", arguments={"path": "README.md"}, id="call_1")
    _script(simulator, "one-tool", Step(reply=Reply(tool_calls=[call])))
    request = ModelRequest(
        messages=[{"role": "user", "content": "read it"}], tools=[ToolSchema(name="read_file")]
    )
    events = await collect(make_provider("codex_responses", "one-tool"), request)
    assert events[0] == ToolCallDelta(index=0, id="call_1", name="read_file", arguments="")
    response = final(events)
    assert response.finish_reason == "tool_calls"
    assert response.message["content"] is None
    assert response.message["tool_calls"] == [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path":"README.md"}'}}
    ]  # fmt: skip


async def test_parallel_tool_calls_keep_their_order(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    calls = [ToolCallSpec(name=f"tool_{i}", arguments={"i": i}) for i in range(3)]
    _script(simulator, "parallel", Step(reply=Reply(text="On it.", tool_calls=calls)))
    events = await collect(make_provider("codex_responses", "parallel"), user("go"))
    starts = [e for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert [(e.index, e.name) for e in starts] == [(0, "tool_0"), (1, "tool_1"), (2, "tool_2")]
    response = final(events)
    assert response.message["content"] == "On it."
    assert [c["function"]["arguments"] for c in response.message["tool_calls"]] == [
        '{"i":0}', '{"i":1}', '{"i":2}'
    ]  # fmt: skip


async def test_usage_reports_cached_tokens_on_a_repeated_prefix(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    provider = make_provider("codex_responses", "cached")
    history: list[Message] = [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": "first question"},
    ]
    first = final(await collect(provider, ModelRequest(messages=history)))
    assert first.usage.cache_read_tokens == 0
    history += [first.message, {"role": "user", "content": "second question"}]
    second = final(await collect(provider, ModelRequest(messages=history)))
    assert 0 < second.usage.cache_read_tokens < second.usage.input_tokens
    assert second.usage.cache_write_tokens == 0


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


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (Fault(status=429, retry_after=7), ErrorKind.RATE_LIMIT),
        (Fault(status=500), ErrorKind.SERVER_ERROR),
        (Fault(status=503), ErrorKind.SERVER_ERROR),
        (Fault(status=401), ErrorKind.AUTH),
        (Fault(status=403), ErrorKind.FORBIDDEN),
        (Fault(status=404, message="The model `x` does not exist"), ErrorKind.NOT_FOUND),
        (
            Fault(status=400, message="Your input exceeds the context window of this model."),
            ErrorKind.CONTEXT_OVERFLOW,
        ),
        (Fault(disconnect_after=2), ErrorKind.CONNECTION),
        (Fault(stream_error="rate_limit_exceeded"), ErrorKind.RATE_LIMIT),
        (Fault(stream_error="server_error", disconnect_after=4), ErrorKind.SERVER_ERROR),
    ],
    ids=lambda value: getattr(value, "value", None) or "",
)
async def test_upstream_faults_become_typed_provider_errors(
    simulator: SimulatorServer, make_provider: ProviderFactory, fault: Fault, kind: ErrorKind
) -> None:
    _script(simulator, "faulty", Step(reply=Reply(text="never seen in full " * 5), fault=fault))
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider("codex_responses", "faulty"), user("hi"))
    assert caught.value.kind is kind
    assert caught.value.provider == PROVIDER
    if fault.status:
        assert caught.value.status_code == fault.status
    if fault.retry_after:
        assert caught.value.retry_after == fault.retry_after
    assert "test-key" not in str(caught.value)


async def test_slow_first_byte_beyond_the_timeout_is_a_timeout(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "slow", Step(reply=Reply(text="late"), fault=Fault(first_byte_delay=2)))
    provider = make_provider("codex_responses", "slow", timeout=0.3)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await collect(provider, user("hi"))
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert time.monotonic() - started < 1.5


def _slow_stream(simulator: SimulatorServer, model: str) -> None:
    # About 45 frames 0.2 s apart: some 9 s if read to the end.
    reply = Reply(text="x" * 40, chunk_count=40)
    _script(simulator, model, Step(reply=reply, fault=Fault(chunk_delay=0.2)))


async def _wait_disconnected(simulator: SimulatorServer, model: str) -> bool:
    return await asyncio.to_thread(
        simulator.state.wait_for,
        lambda reqs: any(r.scenario == model and r.outcome == "disconnected" for r in reqs),
        5.0,
    )


async def test_closing_the_stream_closes_the_upstream_connection(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _slow_stream(simulator, "closed-early")
    started = time.monotonic()
    stream = make_provider("codex_responses", "closed-early").stream(user("hi"))
    assert isinstance(await anext(stream), TextDelta)
    assert isinstance(await anext(stream), TextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await _wait_disconnected(simulator, "closed-early")
    assert time.monotonic() - started < 4
    [record] = simulator.state.requests(scenario="closed-early")
    assert record.frames_sent < 10


async def test_cancelling_the_consumer_closes_the_upstream_connection(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _slow_stream(simulator, "cancelled")
    provider = make_provider("codex_responses", "cancelled")
    seen = asyncio.Event()

    async def consume() -> None:
        async for _ in provider.stream(user("hi")):
            seen.set()

    started = time.monotonic()
    task = asyncio.create_task(consume())
    await asyncio.wait_for(seen.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _wait_disconnected(simulator, "cancelled")
    assert time.monotonic() - started < 4
    [record] = simulator.state.requests(scenario="cancelled")
    assert record.frames_sent < 10
