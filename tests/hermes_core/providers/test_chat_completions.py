"""The chat_completions adapter: stream parsing and request conversion.

Behaviour every adapter shares (streaming over HTTP, errors, timeouts, cancellation, usage) is
tested for all three in ``test_adapter_contract.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_core import json_codec
from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.messages import Message
from hermes_core.providers import (
    ForcedTool,
    ModelReasoningDelta,
    ModelRequest,
    ToolCallDelta,
    ToolSchema,
)
from hermes_core.providers.chat_completions import (
    ChatStreamAccumulator,
    build_kwargs,
    encoded_tools,
    request_body,
)
from hermes_core.usage import Usage


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
    assert events == [ModelReasoningDelta(text="a"), ModelReasoningDelta(text="b")]
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


def test_a_body_with_its_tools_encoded_once_is_the_body_encoded_whole() -> None:
    tools = (
        ToolSchema(name="read", description="Read a file.", parameters={"type": "object"}),
        ToolSchema(name="wörter", description="Zähl sie — ✓", parameters={"type": "object"}),
    )
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=tools)

    body = request_body(build_kwargs(request, model="m"), tools)

    assert body == json_codec.dumps(build_kwargs(request, model="m"))
    assert encoded_tools(tools) is encoded_tools(tools)  # once per tuple
    too_big = {**build_kwargs(request, model="m"), "seed": 2**70}  # orjson refuses this
    assert json_codec.loads(request_body(too_big, tools))["tools"][1]["function"]["name"] == (
        "wörter"
    )
