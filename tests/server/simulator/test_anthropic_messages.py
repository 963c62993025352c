"""The simulator's Anthropic Messages endpoint, reached through the official ``anthropic`` SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import anthropic
import httpx
import pytest
from anthropic.types import (
    MessageParam,
    TextBlock,
    TextBlockParam,
    ThinkingBlock,
    ToolUseBlock,
)

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from server.simulator.anthropic_messages_reply import thinking_signature
from tests.plain_http import TLS_UNUSED

LONG_SYSTEM = "You are a meticulous assistant who explains every step. " * 40


@pytest.fixture
def client(simulator: SimulatorServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=simulator.base_url,
        api_key="test",
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=TLS_UNUSED),
    ) as sdk:
        yield sdk


def _script(simulator: SimulatorServer, model: str, *replies: Reply) -> None:
    simulator.state.script(model, Scenario(steps=[Step(reply=reply) for reply in replies]))


def _hi() -> list[MessageParam]:
    return [{"role": "user", "content": "hi"}]


def _text_block(text: str, cache: Literal["5m", "1h"] | None = None) -> TextBlockParam:
    if cache is None:
        return {"type": "text", "text": text}
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral", "ttl": cache}}


def _post_raw(simulator: SimulatorServer, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{simulator.base_url}/v1/messages", json=body, headers={"x-api-key": "k"})


def _rejection(caught: pytest.ExceptionInfo[anthropic.BadRequestError]) -> str:
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["message"])


# --- replies ----------------------------------------------------------------------------------


def test_non_streaming_text_reply(simulator: SimulatorServer, client: anthropic.Anthropic) -> None:
    _script(simulator, "text", Reply(text="Hello there."))
    message = client.messages.create(model="text", max_tokens=256, messages=_hi())
    assert message.id.startswith("msg_")
    assert message.model == "text"
    assert message.content == [TextBlock(type="text", text="Hello there.")]
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0
    assert message.usage.cache_creation_input_tokens == 0
    assert message.usage.cache_read_input_tokens == 0


def test_unscripted_model_gets_the_default_policy_reply(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-sim", max_tokens=256, system="Be brief.", messages=_hi()
    )
    assert [block.type for block in message.content] == ["text"]
    assert isinstance(message.content[0], TextBlock)
    assert "You said: hi" in message.content[0].text


def test_raw_stream_yields_events_in_protocol_order(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    _script(simulator, "streamed", Reply(text="abcdef", chunk_count=2))
    stream = client.messages.create(model="streamed", max_tokens=256, messages=_hi(), stream=True)
    events = list(stream)
    assert [event.type for event in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = events[0]
    assert start.type == "message_start"
    assert start.message.content == []
    assert start.message.stop_reason is None
    assert start.message.usage.output_tokens == 1
    assert start.message.usage.cache_read_input_tokens == 0
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert [d.text for d in deltas if d.type == "text_delta"] == ["abc", "def"]
    final = events[-2]
    assert final.type == "message_delta"
    assert final.delta.stop_reason == "end_turn"
    assert final.delta.stop_sequence is None
    assert final.usage.output_tokens >= 1


def test_every_stream_frame_is_named_after_its_type(simulator: SimulatorServer) -> None:
    _script(simulator, "frames", Reply(reasoning="think", text="ok"))
    body = {"model": "frames", "max_tokens": 64, "messages": _hi(), "stream": True}
    response = _post_raw(simulator, body)
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [frame for frame in response.text.split("\n\n") if frame]
    names = []
    for frame in frames:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        assert json.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]


def test_stream_helper_assembles_the_final_message(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    _script(simulator, "helper", Reply(text="The answer is 42.", chunk_count=4))
    with client.messages.stream(model="helper", max_tokens=256, messages=_hi()) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    assert text == "The answer is 42."
    assert message.content[0].type == "text"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens > 1


def test_thinking_block_carries_the_issued_signature(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    _script(simulator, "thinker", Reply(reasoning="First, I consider the question.", text="Yes."))
    with client.messages.stream(
        model="thinker",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=_hi(),
    ) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        message = stream.get_final_message()
    assert kinds[-2:] == ["signature_delta", "text_delta"]
    assert kinds.count("signature_delta") == 1
    thinking = message.content[0]
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == "First, I consider the question."
    assert thinking.signature == thinking_signature("First, I consider the question.")


def test_default_policy_thinks_only_when_thinking_is_enabled(client: anthropic.Anthropic) -> None:
    plain = client.messages.create(model="claude-sim", max_tokens=2048, messages=_hi())
    thinking = client.messages.create(
        model="claude-sim",
        max_tokens=2048,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=_hi(),
    )
    assert [b.type for b in plain.content] == ["text"]
    assert [b.type for b in thinking.content] == ["thinking", "text"]


def test_single_tool_use_reply(simulator: SimulatorServer, client: anthropic.Anthropic) -> None:
    call = ToolCallSpec(name="read_file", arguments={"path": "a.txt"}, id="toolu_1")
    _script(simulator, "tool", Reply(tool_calls=[call]))
    message = client.messages.create(
        model="tool",
        max_tokens=256,
        tools=[{"name": "read_file", "input_schema": {"type": "object"}}],
        messages=_hi(),
    )
    assert message.stop_reason == "tool_use"
    assert message.content == [
        ToolUseBlock(type="tool_use", id="toolu_1", name="read_file", input={"path": "a.txt"})
    ]


def test_parallel_tool_use_streams_each_call_as_its_own_block(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    calls = [ToolCallSpec(name=f"tool_{i}", arguments={"i": i}) for i in range(3)]
    _script(simulator, "parallel", Reply(text="Running three tools.", tool_calls=calls))
    with client.messages.stream(model="parallel", max_tokens=256, messages=_hi()) as stream:
        message = stream.get_final_message()
    uses = [block for block in message.content if isinstance(block, ToolUseBlock)]
    assert [(u.name, u.input) for u in uses] == [(f"tool_{i}", {"i": i}) for i in range(3)]
    assert len({u.id for u in uses}) == 3
    assert all(u.id.startswith("toolu_sim") for u in uses)
    assert message.stop_reason == "tool_use"


def test_malformed_arguments_become_empty_input_without_streaming(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    _script(simulator, "broken", Reply(tool_calls=[ToolCallSpec(name="f", raw_arguments='{"a":')]))
    message = client.messages.create(model="broken", max_tokens=256, messages=_hi())
    assert isinstance(message.content[0], ToolUseBlock)
    assert message.content[0].input == {}


def test_malformed_arguments_stream_verbatim(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    raw = '{"path": "a.txt", "mode":'
    _script(
        simulator, "broken-stream", Reply(tool_calls=[ToolCallSpec(name="f", raw_arguments=raw)])
    )
    stream = client.messages.create(
        model="broken-stream", max_tokens=256, messages=_hi(), stream=True
    )
    pieces = [
        e.delta.partial_json
        for e in stream
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert "".join(pieces) == raw


@pytest.mark.parametrize(
    ("finish", "stop_reason"), [("length", "max_tokens"), ("content_filter", "refusal")]
)
def test_finish_reason_maps_to_stop_reason(
    simulator: SimulatorServer, client: anthropic.Anthropic, finish: Any, stop_reason: str
) -> None:
    _script(simulator, "stopper", Reply(text="partial", finish_reason=finish))
    message = client.messages.create(model="stopper", max_tokens=256, messages=_hi())
    assert message.stop_reason == stop_reason


def test_in_stream_error_frame_raises_in_the_sdk(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    step = Step(reply=Reply(text="never"), fault=Fault(stream_error="overloaded_error"))
    simulator.state.script("overloaded", Scenario(steps=[step]))
    with pytest.raises(anthropic.APIStatusError) as caught:
        list(client.messages.create(model="overloaded", max_tokens=64, messages=_hi(), stream=True))
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Simulated in-stream error."},
    }


def test_overloaded_status_uses_the_anthropic_error_envelope(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    simulator.state.script("busy", Scenario(steps=[Step(fault=Fault(status=529))]))
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="busy", max_tokens=64, messages=_hi())
    assert caught.value.status_code == 529
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["error"]["type"] == "overloaded_error"


# --- prompt caching ---------------------------------------------------------------------------


def _cached_call(
    client: anthropic.Anthropic, *, ttl: Literal["5m", "1h"] = "5m", question: str = "hi"
) -> anthropic.types.Usage:
    message = client.messages.create(
        model="claude-sim",
        max_tokens=256,
        system=[_text_block(LONG_SYSTEM, ttl)],
        messages=[{"role": "user", "content": question}],
    )
    return message.usage


def test_first_call_writes_the_cache_and_an_identical_prefix_reads_it(
    client: anthropic.Anthropic,
) -> None:
    first = _cached_call(client)
    second = _cached_call(client, question="a different question")
    assert first.cache_creation_input_tokens
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation is not None
    assert first.cache_creation.ephemeral_5m_input_tokens == first.cache_creation_input_tokens
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert 0 < second.input_tokens < second.cache_read_input_tokens


def test_input_tokens_exclude_cache_reads_and_writes(client: anthropic.Anthropic) -> None:
    uncached = client.messages.create(
        model="claude-sim", max_tokens=256, system=LONG_SYSTEM, messages=_hi()
    ).usage
    written = _cached_call(client)
    assert written.cache_creation_input_tokens is not None
    assert written.input_tokens + written.cache_creation_input_tokens == uncached.input_tokens


def test_expired_ttl_writes_the_cache_again(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    first = _cached_call(client)
    simulator.state.advance_clock(301)
    again = _cached_call(client)
    assert again.cache_read_input_tokens == 0
    assert again.cache_creation_input_tokens == first.cache_creation_input_tokens


def test_one_hour_ttl_survives_five_minutes_and_is_reported_apart(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    first = _cached_call(client, ttl="1h")
    assert first.cache_creation is not None
    assert first.cache_creation.ephemeral_1h_input_tokens == first.cache_creation_input_tokens
    assert first.cache_creation.ephemeral_5m_input_tokens == 0
    simulator.state.advance_clock(301)
    assert _cached_call(client, ttl="1h").cache_read_input_tokens == (
        first.cache_creation_input_tokens
    )


def test_prefix_below_min_cacheable_tokens_is_not_cached(
    simulator: SimulatorServer, client: anthropic.Anthropic
) -> None:
    simulator.state.cache.min_cacheable_tokens = 100_000
    first = _cached_call(client)
    second = _cached_call(client)
    assert first.cache_creation_input_tokens == 0
    assert second.cache_read_input_tokens == 0


def test_unmarking_an_earlier_block_keeps_the_cached_prefix(client: anthropic.Anthropic) -> None:
    # A rolling strategy drops the system marker once four later blocks want one: the prefix up
    # to the still-marked first turn must read from the cache all the same.
    first = client.messages.create(
        model="claude-sim",
        max_tokens=256,
        system=[_text_block(LONG_SYSTEM, "5m")],
        messages=[{"role": "user", "content": [_text_block("hi", "5m")]}],
    ).usage
    second = client.messages.create(
        model="claude-sim",
        max_tokens=256,
        system=[_text_block(LONG_SYSTEM)],
        messages=[
            {"role": "user", "content": [_text_block("hi", "5m")]},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": [_text_block("and then?", "5m")]},
        ],
    ).usage
    assert first.cache_creation_input_tokens
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens
    assert second.cache_creation_input_tokens > 0


def test_five_cache_breakpoints_are_rejected(client: anthropic.Anthropic) -> None:
    # Markers count wherever they sit: here two on the system prompt, three on message blocks.
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-sim",
            max_tokens=64,
            system=[_text_block("rules", "5m"), _text_block("more rules", "5m")],
            messages=[
                {"role": "user", "content": [_text_block("a", "5m"), _text_block("b", "5m")]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [_text_block("c", "5m")]},
            ],
        )
    assert (
        _rejection(caught) == "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


# --- validation -------------------------------------------------------------------------------


def test_missing_max_tokens_is_rejected(simulator: SimulatorServer) -> None:
    response = _post_raw(simulator, {"model": "claude-sim", "messages": _hi()})
    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }


def test_empty_messages_are_rejected(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-sim", max_tokens=64, messages=[])
    assert "at least one message" in _rejection(caught)


def _tool_use_turn(*ids: str) -> MessageParam:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids],
    }


def test_tool_use_without_a_following_tool_result_is_rejected(client: anthropic.Anthropic) -> None:
    history: list[MessageParam] = [
        {"role": "user", "content": "go"},
        _tool_use_turn("toolu_a", "toolu_b"),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "done"}],
        },
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-sim", max_tokens=64, messages=history)
    assert _rejection(caught) == (
        "messages.1: tool_use ids were found without tool_result blocks immediately after: "
        "toolu_b. Each tool_use block must have a corresponding tool_result block in the next "
        "message."
    )


def test_tool_result_for_an_unknown_tool_use_is_rejected(client: anthropic.Anthropic) -> None:
    history: list[MessageParam] = [
        {"role": "user", "content": "go"},
        _tool_use_turn("toolu_a"),
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "done"},
                {"type": "tool_result", "tool_use_id": "toolu_zzz", "content": "?"},
            ],
        },
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-sim", max_tokens=64, messages=history)
    assert _rejection(caught) == (
        "messages.2.content.1: unexpected tool_use_id found in tool_result blocks: toolu_zzz. "
        "Each tool_result block must have a corresponding tool_use block in the previous message."
    )


def _thinking_history(signature: str) -> list[MessageParam]:
    return [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call f.", "signature": signature},
                {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "done"}],
        },
    ]


def test_replayed_thinking_with_its_signature_is_accepted(client: anthropic.Anthropic) -> None:
    history = _thinking_history(thinking_signature("I should call f."))
    message = client.messages.create(model="claude-sim", max_tokens=64, messages=history)
    assert message.stop_reason == "end_turn"


def test_replayed_thinking_with_a_wrong_signature_is_rejected(client: anthropic.Anthropic) -> None:
    history = _thinking_history(thinking_signature("I should call g."))
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="claude-sim", max_tokens=64, messages=history)
    assert _rejection(caught) == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_thinking_budget_not_below_max_tokens_is_rejected(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-sim",
            max_tokens=1024,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=_hi(),
        )
    assert "max_tokens` must be greater than `thinking.budget_tokens" in _rejection(caught)


def test_thinking_with_a_forced_tool_choice_is_rejected(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="claude-sim",
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            tools=[{"name": "alpha", "input_schema": {"type": "object"}}],
            tool_choice={"type": "any"},
            messages=_hi(),
        )
    assert _rejection(caught) == "Thinking may not be enabled when tool_choice forces tool use."


def test_forced_tool_choice_makes_the_default_policy_call_it(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-sim",
        max_tokens=64,
        tools=[
            {"name": "alpha", "input_schema": {"type": "object"}},
            {"name": "beta", "input_schema": {"type": "object"}},
        ],
        tool_choice={"type": "tool", "name": "beta"},
        messages=_hi(),
    )
    assert isinstance(message.content[0], ToolUseBlock)
    assert message.content[0].name == "beta"


def test_tool_result_is_summarised_by_the_default_policy(client: anthropic.Anthropic) -> None:
    history: list[MessageParam] = [
        {"role": "user", "content": "go"},
        _tool_use_turn("toolu_a"),
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "42 files"}],
        },
    ]
    message = client.messages.create(model="claude-sim", max_tokens=64, messages=history)
    assert isinstance(message.content[0], TextBlock)
    assert message.content[0].text == "The tool returned: 42 files"
