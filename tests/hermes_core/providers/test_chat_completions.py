"""The chat_completions adapter: stream parsing and request conversion.

Behaviour every adapter shares (streaming over HTTP, errors, timeouts, cancellation, usage) is
tested for all three in ``test_adapter_contract.py``.
"""

from __future__ import annotations

import json
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
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


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


# --- a reply nobody watches, fetched in one piece -----------------------------------------------


def _unwatched(text: str) -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": text}], stream=False)


async def test_an_unwatched_call_fetches_the_reply_in_one_piece(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    reply = Reply(reasoning="Think first.", text="Hello there, world!", chunk_count=5)
    simulator.state.script("whole", Scenario(steps=[Step(reply=reply)]))
    events = await collect(make_provider("chat_completions", "whole"), _unwatched("hi"))
    assert events[:-1] == [
        ReasoningDelta(text="Think first."),
        TextDelta(text="Hello there, world!"),
    ]
    response = final(events)
    assert response.message == {
        "role": "assistant", "content": "Hello there, world!", "reasoning": "Think first."
    }  # fmt: skip
    assert (response.finish_reason, response.model) == ("stop", "whole")
    assert response.usage.output_tokens > 0
    assert response.usage.reasoning_tokens > 0
    [sent] = simulator.state.requests(scenario="whole")
    assert "stream" not in sent.body
    assert "stream_options" not in sent.body
    assert sent.headers["accept"] == "application/json"


async def test_an_unwatched_call_assembles_its_tool_calls_in_order(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    calls = [ToolCallSpec(name="read", arguments={"path": "a"}),
             ToolCallSpec(name="list", arguments={"path": "b"})]  # fmt: skip
    simulator.state.script("tools", Scenario(steps=[Step(reply=Reply(tool_calls=calls))]))
    request = ModelRequest(
        messages=[{"role": "user", "content": "go"}],
        tools=[ToolSchema(name="read"), ToolSchema(name="list")],
        stream=False,
    )
    events = await collect(make_provider("chat_completions", "tools"), request)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.index, d.name, json.loads(d.arguments)) for d in deltas] == [
        (0, "read", {"path": "a"}), (1, "list", {"path": "b"})
    ]  # fmt: skip
    response = final(events)
    assert response.finish_reason == "tool_calls"
    assert [c["function"]["name"] for c in response.message["tool_calls"]] == ["read", "list"]
    assert all(c["id"] for c in response.message["tool_calls"])


async def test_an_unwatched_call_whose_upstream_drops_is_a_connection_error(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    reply = Reply(text="Hello there, world!", chunk_count=4)
    step = Step(reply=reply, fault=Fault(disconnect_after=2))
    simulator.state.script("drop", Scenario(steps=[step]))
    with pytest.raises(ProviderError) as caught:
        await collect(make_provider("chat_completions", "drop"), _unwatched("hi"))
    assert caught.value.kind is ErrorKind.CONNECTION
