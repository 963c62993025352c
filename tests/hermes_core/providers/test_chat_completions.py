"""The chat_completions adapter: stream parsing, conversion, errors and cancellation."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ForcedTool,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSchema,
)
from hermes_core.providers.chat_completions import ChatStreamAccumulator, build_kwargs
from hermes_core.usage import Usage
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final, user


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def _script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


# --- the accumulator, on literal chunks ---------------------------------------------------------


def test_accumulator_assembles_interleaved_parallel_tool_calls() -> None:
    acc = ChatStreamAccumulator()
    chunks = [
        _chunk({"role": "assistant", "content": None}),
        _chunk(
            {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}}]}
        ),
        _chunk(
            {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}}]}
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        _chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        _chunk({}, "tool_calls"),
    ]
    events = [event for chunk in chunks for event in acc.feed(chunk)]
    assert events[0] == ToolCallDelta(index=0, id="a", name="f", arguments="")
    response = acc.finish(provider="p", model="m")
    assert response.finish_reason == "tool_calls"
    assert response.message["tool_calls"] == [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]


def test_accumulator_reads_reasoning_under_either_vendor_key() -> None:
    acc = ChatStreamAccumulator()
    events = acc.feed(_chunk({"reasoning_content": "a"})) + acc.feed(_chunk({"reasoning": "b"}))
    assert events == [ReasoningDelta(text="a"), ReasoningDelta(text="b")]
    acc.feed(_chunk({"content": "ok"}, "stop"))
    assert acc.finish(provider="p", model="m").message["reasoning"] == "ab"


def test_accumulator_normalises_usage_with_cache_and_reasoning() -> None:
    acc = ChatStreamAccumulator()
    acc.feed(_chunk({"content": "x"}, "stop"))
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 30,
        "total_tokens": 130,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 10},
    }
    acc.feed({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
              "choices": [], "usage": usage})  # fmt: skip
    assert acc.finish(provider="p", model="m").usage == Usage(
        input_tokens=100, cache_read_tokens=64, output_tokens=30, reasoning_tokens=10
    )


def test_accumulator_refuses_a_stream_that_never_finished() -> None:
    acc = ChatStreamAccumulator()
    acc.feed(_chunk({"content": "half an ans"}))
    with pytest.raises(ProviderError) as caught:
        acc.finish(provider="p", model="m")
    assert caught.value.kind is ErrorKind.CONNECTION


def test_build_kwargs_strips_private_keys_and_maps_a_forced_tool() -> None:
    history: list[Message] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "reasoning": "hmm",
         "reasoning_replay": {"api_mode": "anthropic_messages", "items": []},
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]  # fmt: skip
    request = ModelRequest(
        messages=history, tools=[ToolSchema(name="f")], tool_choice=ForcedTool(name="f")
    )
    kwargs = build_kwargs(request, model="m")
    assert kwargs["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    assert kwargs["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert history[1]["reasoning"] == "hmm"  # the caller's history is untouched


# --- against the simulator over HTTP ----------------------------------------------------------


async def test_plain_text_streams_as_text_deltas(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "plain", Step(reply=Reply(text="Hello there, world!", chunk_count=3)))
    events = await collect(make_provider("chat_completions", "plain"), user("hi"))
    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta(text="Hello t"), TextDelta(text="here, "), TextDelta(text="world!")
    ]  # fmt: skip
    response = final(events)
    assert response.message == {"role": "assistant", "content": "Hello there, world!"}
    assert response.finish_reason == "stop"
    assert response.provider == "sim-chat_completions"


async def test_reasoning_content_becomes_reasoning_deltas(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "thinker", Step(reply=Reply(reasoning="First, think.", text="42")))
    events = await collect(make_provider("chat_completions", "thinker"), user("?"))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == "First, think."
    assert final(events).message["reasoning"] == "First, think."
    assert final(events).usage.reasoning_tokens > 0


async def test_single_tool_call_is_assembled(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    call = ToolCallSpec(name="read_file", arguments={"path": "README.md"}, id="call_1")
    _script(simulator, "one-tool", Step(reply=Reply(tool_calls=[call])))
    request = ModelRequest(
        messages=[{"role": "user", "content": "read it"}], tools=[ToolSchema(name="read_file")]
    )
    response = final(await collect(make_provider("chat_completions", "one-tool"), request))
    assert response.finish_reason == "tool_calls"
    assert response.message["tool_calls"] == [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path":"README.md"}'}}
    ]  # fmt: skip
    sent = simulator.state.requests(scenario="one-tool")[0].body
    assert sent["tools"][0]["function"]["name"] == "read_file"
    assert sent["stream_options"] == {"include_usage": True}


async def test_parallel_tool_calls_keep_their_order(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    calls = [ToolCallSpec(name=f"tool_{i}", arguments={"i": i}) for i in range(3)]
    _script(simulator, "parallel", Step(reply=Reply(tool_calls=calls)))
    response = final(await collect(make_provider("chat_completions", "parallel"), user("go")))
    names = [c["function"]["name"] for c in response.message["tool_calls"]]
    assert names == ["tool_0", "tool_1", "tool_2"]
    assert [c["function"]["arguments"] for c in response.message["tool_calls"]] == [
        '{"i":0}', '{"i":1}', '{"i":2}'
    ]  # fmt: skip


async def test_usage_reports_cached_prompt_tokens_on_a_repeated_prefix(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    provider = make_provider("chat_completions", "cached")
    history: list[Message] = [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": "first question"},
    ]
    first = final(await collect(provider, ModelRequest(messages=history)))
    assert first.usage.cache_read_tokens == 0
    history += [first.message, {"role": "user", "content": "second question"}]
    second = final(await collect(provider, ModelRequest(messages=history)))
    assert second.usage.cache_read_tokens >= first.usage.input_tokens
    assert second.usage.input_tokens > second.usage.cache_read_tokens


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
            Fault(status=400, message="This model's maximum context length is 8192 tokens"),
            ErrorKind.CONTEXT_OVERFLOW,
        ),
        (Fault(status=400, message="bad temperature"), ErrorKind.INVALID_REQUEST),
        (Fault(disconnect_after=2), ErrorKind.CONNECTION),
        (Fault(stream_error="server_error"), ErrorKind.SERVER_ERROR),
    ],
    ids=lambda value: getattr(value, "value", None) or "",
)
async def test_upstream_faults_become_typed_provider_errors(
    simulator: SimulatorServer, make_provider: ProviderFactory, fault: Fault, kind: ErrorKind
) -> None:
    _script(simulator, "faulty", Step(reply=Reply(text="never seen in full " * 5), fault=fault))
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider("chat_completions", "faulty"), user("hi"))
    assert caught.value.kind is kind
    assert caught.value.provider == "sim-chat_completions"
    if fault.status:
        assert caught.value.status_code == fault.status
    if fault.retry_after:
        assert caught.value.retry_after == fault.retry_after
    assert "test-key" not in str(caught.value)


async def test_slow_first_byte_beyond_the_timeout_is_a_timeout(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _script(simulator, "slow", Step(reply=Reply(text="late"), fault=Fault(first_byte_delay=2)))
    provider = make_provider("chat_completions", "slow", timeout=0.3)
    with pytest.raises(ProviderError) as caught:
        await collect(provider, user("hi"))
    assert caught.value.kind is ErrorKind.TIMEOUT


def _slow_stream(simulator: SimulatorServer, model: str) -> None:
    # 40 chunks 0.25 s apart: about 10 s if read to the end.
    reply = Reply(text="x" * 40, chunk_count=40)
    _script(simulator, model, Step(reply=reply, fault=Fault(chunk_delay=0.25)))


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
    stream = make_provider("chat_completions", "closed-early").stream(user("hi"))
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await _wait_disconnected(simulator, "closed-early")
    assert time.monotonic() - started < 5


async def test_cancelling_the_consumer_closes_the_upstream_connection(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _slow_stream(simulator, "cancelled")
    provider = make_provider("chat_completions", "cancelled")
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
    assert time.monotonic() - started < 5
