"""The contract every adapter keeps, whatever its wire protocol.

Each test runs once per api_mode against the simulator over real HTTP. Where the protocols
differ (error messages, in-stream error types, what lands on the wire) the expected value is
looked up per mode. Protocol-specific behaviour (stream parsing on literal events, message
conversion, reasoning replay, cache-marker placement) stays in ``test_<api_mode>.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ProviderEvent,
    ToolCallDelta,
    ToolSchema,
)
from hermes_core.providers.base import API_MODES, ApiMode, PromptCachePolicy
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.hermes_core.providers.conftest import API_KEY, ProviderFactory, collect, final, user

each_mode = pytest.mark.parametrize("api_mode", API_MODES)


def _script(simulator: SimulatorServer, model: str, *steps: Step) -> None:
    simulator.state.script(model, Scenario(steps=list(steps)))


# --- streamed replies and what goes on the wire --------------------------------------------------

_PATHS: dict[ApiMode, str] = {
    "chat_completions": "/v1/chat/completions",
    "codex_responses": "/v1/responses",
    "anthropic_messages": "/v1/messages",
}
_ALWAYS_SENT: dict[ApiMode, dict[str, Any]] = {
    # Without include_usage a Chat Completions stream reports no usage at all.
    "chat_completions": {"stream": True, "stream_options": {"include_usage": True}},
    "codex_responses": {"stream": True, "store": False},
    # max_tokens is required by the Messages API: the configured default (4096) is sent.
    "anthropic_messages": {"stream": True, "max_tokens": 4096},
}


def _subset(body: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    return {key: body.get(key) for key in expected}


@each_mode
async def test_plain_text_streams_as_text_deltas(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    # Chunks that arrive apart are deltas apart (a burst may be merged: see test_upstream_http).
    reply = Reply(text="Hello there, world!", chunk_count=3)
    _script(simulator, "plain", Step(reply=reply, fault=Fault(chunk_delay=0.05)))
    provider = make_provider(api_mode, "plain")
    events = await collect(provider, user("hi"))
    assert events[:-1] == [
        ModelTextDelta(text="Hello t"), ModelTextDelta(text="here, "), ModelTextDelta(text="world!")
    ]  # fmt: skip
    response = final(events)
    assert response.message == {"role": "assistant", "content": "Hello there, world!"}
    assert (response.finish_reason, response.provider, response.model) == (
        "stop",
        f"sim-{api_mode}",
        "plain",
    )
    assert provider.api_mode == api_mode
    [sent] = simulator.state.requests(scenario="plain")
    assert sent.path == _PATHS[api_mode]
    assert _subset(sent.body, _ALWAYS_SENT[api_mode]) == _ALWAYS_SENT[api_mode]


_REASONING_SENT: dict[ApiMode, dict[str, Any]] = {
    "chat_completions": {"reasoning_effort": "low"},
    "codex_responses": {"reasoning": {"effort": "low", "summary": "auto"}},
    "anthropic_messages": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
}
_REPLAY_ITEMS: dict[ApiMode, list[str] | None] = {
    "chat_completions": None,  # Chat Completions has nothing to replay
    "codex_responses": ["reasoning"],
    "anthropic_messages": ["thinking"],
}


@each_mode
async def test_reasoning_streams_as_reasoning_deltas(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    _script(simulator, "thinker", Step(reply=Reply(reasoning="First, think.", text="42")))
    request = ModelRequest(messages=[{"role": "user", "content": "?"}], reasoning_effort="low")
    events = await collect(make_provider(api_mode, "thinker"), request)
    assert "".join(e.text for e in events if isinstance(e, ModelReasoningDelta)) == "First, think."
    assert "".join(e.text for e in events if isinstance(e, ModelTextDelta)) == "42"
    response = final(events)
    assert response.message["reasoning"] == "First, think."
    assert response.message["content"] == "42"
    assert response.usage.reasoning_tokens > 0
    replay = response.message.get("reasoning_replay")
    if _REPLAY_ITEMS[api_mode] is None:
        assert replay is None
    else:
        assert replay is not None
        assert replay["api_mode"] == api_mode
        assert [item["type"] for item in replay["items"]] == _REPLAY_ITEMS[api_mode]
    sent = simulator.state.requests(scenario="thinker")[0].body
    assert _subset(sent, _REASONING_SENT[api_mode]) == _REASONING_SENT[api_mode]


_TOOL_NAME: dict[ApiMode, Callable[[dict[str, Any]], str]] = {
    # Where an offered tool's name sits in each protocol's tool definition.
    "chat_completions": lambda tool: tool["function"]["name"],
    "codex_responses": lambda tool: tool["name"],
    "anthropic_messages": lambda tool: tool["name"],
}
_REQUIRED_SENT: dict[ApiMode, Any] = {
    "chat_completions": "required",
    "codex_responses": "required",
    "anthropic_messages": {"type": "any"},
}


@each_mode
async def test_single_tool_call_is_assembled(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    call = ToolCallSpec(name="read_file", arguments={"path": "README.md"}, id="call_1")
    _script(simulator, "one-tool", Step(reply=Reply(tool_calls=[call])))
    request = ModelRequest(
        messages=[{"role": "user", "content": "read it"}],
        tools=[ToolSchema(name="read_file")],
        tool_choice="required",
    )
    events = await collect(make_provider(api_mode, "one-tool"), request)
    first = events[0]  # names the call (its arguments may come with it or after it)
    assert isinstance(first, ToolCallDelta)
    assert (first.index, first.id, first.name) == (0, "call_1", "read_file")
    assert "".join(e.arguments for e in events if isinstance(e, ToolCallDelta)) == (
        '{"path":"README.md"}'
    )
    response = final(events)
    assert response.finish_reason == "tool_calls"
    assert response.message["content"] is None
    assert response.message["tool_calls"] == [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path":"README.md"}'}}
    ]  # fmt: skip
    sent = simulator.state.requests(scenario="one-tool")[0].body
    assert [_TOOL_NAME[api_mode](tool) for tool in sent["tools"]] == ["read_file"]
    assert sent["tool_choice"] == _REQUIRED_SENT[api_mode]


@each_mode
async def test_parallel_tool_calls_keep_their_order(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    calls = [ToolCallSpec(name=f"tool_{i}", arguments={"i": i}) for i in range(3)]
    _script(simulator, "parallel", Step(reply=Reply(text="On it.", tool_calls=calls)))
    events = await collect(make_provider(api_mode, "parallel"), user("go"))
    heads = [e for e in events if isinstance(e, ToolCallDelta) and e.name]
    assert [(e.index, e.name) for e in heads] == [(i, f"tool_{i}") for i in range(3)]
    response = final(events)
    assert response.finish_reason == "tool_calls"
    assert response.message["content"] == "On it."
    tool_calls = response.message["tool_calls"]
    assert [c["function"]["name"] for c in tool_calls] == ["tool_0", "tool_1", "tool_2"]
    assert [c["function"]["arguments"] for c in tool_calls] == [
        '{"i":0}', '{"i":1}', '{"i":2}'
    ]  # fmt: skip
    assert len({c["id"] for c in tool_calls}) == 3


# --- replies nobody watches -----------------------------------------------------------------------


def _unwatched(text: str, **fields: Any) -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": text}], stream=False, **fields)


@each_mode
async def test_an_unwatched_call_gives_the_same_reply_in_one_delta_per_kind(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    reply = Reply(reasoning="Think first.", text="Hello there, world!", chunk_count=5)
    _script(simulator, "whole", Step(reply=reply))
    request = _unwatched("hi", reasoning_effort="low")
    events = await collect(make_provider(api_mode, "whole"), request)
    assert events[:-1] == [
        ModelReasoningDelta(text="Think first."), ModelTextDelta(text="Hello there, world!")
    ]  # fmt: skip
    response = final(events)
    assert (response.message["content"], response.message["reasoning"]) == (
        "Hello there, world!",
        "Think first.",
    )
    assert (response.finish_reason, response.model) == ("stop", "whole")
    assert response.usage.output_tokens > 0
    [sent] = simulator.state.requests(scenario="whole")
    assert "stream" not in sent.body


@each_mode
async def test_an_unwatched_call_assembles_its_tool_calls_in_order(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    calls = [ToolCallSpec(name="read", arguments={"path": "a"}, id="call_a"),
             ToolCallSpec(name="list", arguments={"path": "b"}, id="call_b")]  # fmt: skip
    _script(simulator, "tools", Step(reply=Reply(tool_calls=calls)))
    request = _unwatched("go", tools=[ToolSchema(name="read"), ToolSchema(name="list")])
    response = final(await collect(make_provider(api_mode, "tools"), request))
    assert response.finish_reason == "tool_calls"
    assert response.message["tool_calls"] == [
        {"id": "call_a", "type": "function",
         "function": {"name": "read", "arguments": '{"path":"a"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "list", "arguments": '{"path":"b"}'}},
    ]  # fmt: skip


@each_mode
async def test_an_unwatched_call_whose_upstream_drops_is_a_connection_error(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    reply = Reply(text="never seen in full " * 5, chunk_count=8)
    _script(simulator, "dropped", Step(reply=reply, fault=Fault(disconnect_after=3)))
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider(api_mode, "dropped"), _unwatched("hi"))
    assert caught.value.kind is ErrorKind.CONNECTION
    assert API_KEY not in str(caught.value)


# --- usage ---------------------------------------------------------------------------------------

_PROMPT_CACHE: dict[ApiMode, PromptCachePolicy | None] = {
    # OpenAI caches a repeated prefix by itself; Anthropic caches only up to a breakpoint.
    "chat_completions": None,
    "codex_responses": None,
    "anthropic_messages": PromptCachePolicy(),
}


@each_mode
async def test_usage_reports_cached_tokens_on_a_repeated_prefix(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    provider = make_provider(api_mode, "cached")
    history: list[Message] = [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": "first question"},
    ]
    cache = _PROMPT_CACHE[api_mode]
    first = final(await collect(provider, ModelRequest(messages=history, prompt_cache=cache)))
    assert first.usage.cache_read_tokens == 0
    history += [first.message, {"role": "user", "content": "second question"}]
    second = final(await collect(provider, ModelRequest(messages=history, prompt_cache=cache)))
    # The whole first prompt is the repeated prefix; the new turn is not cached yet.
    assert second.usage.cache_read_tokens >= first.usage.input_tokens
    assert 0 < second.usage.cache_read_tokens < second.usage.input_tokens
    if cache is None:
        assert first.usage.cache_write_tokens == second.usage.cache_write_tokens == 0
    else:
        assert first.usage.cache_write_tokens > 0
        assert second.usage.cache_read_tokens == first.usage.cache_write_tokens


# --- faults --------------------------------------------------------------------------------------

_NOT_FOUND_MESSAGES: dict[ApiMode, str] = {
    "chat_completions": "The model `x` does not exist",
    "codex_responses": "The model `x` does not exist",
    "anthropic_messages": "model: claude-nope",
}
_OVERFLOW_MESSAGES: dict[ApiMode, str] = {
    "chat_completions": "This model's maximum context length is 8192 tokens",
    "codex_responses": "Your input exceeds the context window of this model.",
    "anthropic_messages": "prompt is too long: 210000 tokens > 200000 maximum",
}
_PROTOCOL_FAULTS: dict[ApiMode, list[tuple[str, Fault, ErrorKind]]] = {
    # In-stream error frames carry each protocol's own error type names.
    "chat_completions": [
        ("stream-server_error", Fault(stream_error="server_error"), ErrorKind.SERVER_ERROR),
    ],
    "codex_responses": [
        (
            "stream-rate_limit_exceeded",
            Fault(stream_error="rate_limit_exceeded"),
            ErrorKind.RATE_LIMIT,
        ),
        (
            "stream-server_error-late",
            Fault(stream_error="server_error", disconnect_after=4),
            ErrorKind.SERVER_ERROR,
        ),
    ],
    "anthropic_messages": [
        ("529-overloaded", Fault(status=529, message="Overloaded"), ErrorKind.SERVER_ERROR),
        ("stream-overloaded_error", Fault(stream_error="overloaded_error"), ErrorKind.SERVER_ERROR),
    ],
}


def _fault_cases() -> list[Any]:
    cases = []
    for mode in API_MODES:
        shared = [
            ("429", Fault(status=429, retry_after=7), ErrorKind.RATE_LIMIT),
            ("500", Fault(status=500), ErrorKind.SERVER_ERROR),
            ("503", Fault(status=503), ErrorKind.SERVER_ERROR),
            ("401", Fault(status=401), ErrorKind.AUTH),
            ("403", Fault(status=403), ErrorKind.FORBIDDEN),
            ("404", Fault(status=404, message=_NOT_FOUND_MESSAGES[mode]), ErrorKind.NOT_FOUND),
            ("400-context", Fault(status=400, message=_OVERFLOW_MESSAGES[mode]),
             ErrorKind.CONTEXT_OVERFLOW),
            ("400", Fault(status=400, message="bad temperature"), ErrorKind.INVALID_REQUEST),
        ]  # fmt: skip
        for label, fault, kind in shared + _PROTOCOL_FAULTS[mode]:
            cases.append(pytest.param(mode, fault, kind, id=f"{mode}-{label}"))
    return cases


@pytest.mark.parametrize(("api_mode", "fault", "kind"), _fault_cases())
async def test_upstream_faults_become_typed_provider_errors(
    simulator: SimulatorServer,
    make_provider: ProviderFactory,
    api_mode: ApiMode,
    fault: Fault,
    kind: ErrorKind,
) -> None:
    _script(simulator, "faulty", Step(reply=Reply(text="never seen in full " * 5), fault=fault))
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider(api_mode, "faulty"), user("hi"))
    assert caught.value.kind is kind
    assert caught.value.provider == f"sim-{api_mode}"
    assert caught.value.status_code == fault.status
    assert caught.value.retry_after == fault.retry_after
    assert API_KEY not in str(caught.value)


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(Fault(first_byte_delay=2), id="slow-first-byte"),
        pytest.param(Fault(chunk_delay=2), id="stalled-stream"),
    ],
)
@each_mode
async def test_no_answer_within_the_timeout_is_a_timeout(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode, fault: Fault
) -> None:
    _script(simulator, "slow", Step(reply=Reply(text="abcd", chunk_count=4), fault=fault))
    provider = make_provider(api_mode, "slow", timeout=0.1)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await collect(provider, user("hi"))
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert caught.value.provider == f"sim-{api_mode}"
    assert time.monotonic() - started < 1.5


@each_mode
async def test_a_stream_that_keeps_coming_may_last_longer_than_the_timeout(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    # The timeout bounds each silence, not the answer: frames 0.15 s apart under a 0.3 s one,
    # two text deltas among the protocol's other frames (five at least: 0.6 s and more).
    reply = Reply(text="ab", chunk_count=2)
    _script(simulator, "steady", Step(reply=reply, fault=Fault(chunk_delay=0.15)))
    provider = make_provider(api_mode, "steady", timeout=0.3)
    started = time.monotonic()
    events = await collect(provider, user("hi"))
    assert time.monotonic() - started > 0.45  # well past the timeout
    assert final(events).message["content"] == "ab"


async def _until_error(
    stream: AsyncIterator[ProviderEvent],
) -> tuple[list[ProviderEvent], ProviderError]:
    """The events a stream yielded before it raised, and what it raised."""
    seen: list[ProviderEvent] = []
    try:
        async for event in stream:
            seen.append(event)
    except ProviderError as error:
        return seen, error
    pytest.fail(f"the stream ended without an error: {seen}")


@pytest.mark.parametrize("frames", [2, 6], ids=["early", "mid-text"])
@each_mode
async def test_a_dropped_connection_is_a_connection_error(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode, frames: int
) -> None:
    reply = Reply(text="never seen in full " * 5, chunk_count=8)
    _script(simulator, "dropped", Step(reply=reply, fault=Fault(disconnect_after=frames)))
    stream = make_provider(api_mode, "dropped").stream(user("hi"))
    seen, error = await _until_error(stream)
    assert error.kind is ErrorKind.CONNECTION
    assert error.provider == f"sim-{api_mode}"
    assert API_KEY not in str(error)
    assert not any(isinstance(e, ModelResponse) for e in seen)
    if frames == 6:
        # What arrived before the drop was passed on before the error.
        assert any(isinstance(e, ModelTextDelta) for e in seen)
    [record] = simulator.state.requests(scenario="dropped")
    assert record.outcome == "dropped"


@each_mode
async def test_no_error_message_contains_the_api_key(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    key = "sk-sim-0123456789abcdef"
    # Upstreams do echo the key they refused.
    fault = Fault(status=401, message=f"Incorrect API key provided: {key}.")
    _script(simulator, "leaky", Step(fault=fault))
    provider = make_provider(api_mode, "leaky", api_key=SecretStr(key))
    with pytest.raises(ProviderError) as caught:
        await collect(provider, user("hi"))
    assert caught.value.kind is ErrorKind.AUTH
    assert key not in str(caught.value)
    assert key not in repr(caught.value)


# --- cancellation --------------------------------------------------------------------------------


def _slow_stream(simulator: SimulatorServer, model: str) -> None:
    # 40 text deltas (some 45 frames) 0.2 s apart: about 9 s if read to the end.
    reply = Reply(text="x" * 40, chunk_count=40)
    _script(simulator, model, Step(reply=reply, fault=Fault(chunk_delay=0.2)))


async def _wait_disconnected(simulator: SimulatorServer, model: str) -> bool:
    return await asyncio.to_thread(
        simulator.state.wait_for,
        lambda reqs: any(r.scenario == model and r.outcome == "disconnected" for r in reqs),
        5.0,
    )


@each_mode
async def test_closing_the_stream_closes_the_upstream_connection(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    _slow_stream(simulator, "closed-early")
    started = time.monotonic()
    stream = make_provider(api_mode, "closed-early").stream(user("hi"))
    assert isinstance(await anext(stream), ModelTextDelta)
    assert isinstance(await anext(stream), ModelTextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await _wait_disconnected(simulator, "closed-early")
    assert time.monotonic() - started < 4
    [record] = simulator.state.requests(scenario="closed-early")
    assert record.frames_sent < 10


@each_mode
async def test_cancelling_the_consumer_closes_the_upstream_connection(
    simulator: SimulatorServer, make_provider: ProviderFactory, api_mode: ApiMode
) -> None:
    _slow_stream(simulator, "cancelled")
    provider = make_provider(api_mode, "cancelled")
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
