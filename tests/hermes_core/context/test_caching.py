"""Prompt caching: breakpoint placement (pure) and its effect on the simulator (over HTTP)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.agent import Agent, AgentRequest, ContextHooks
from hermes_core.context.caching import (
    CachingContext,
    PromptCacheSettings,
    cache_policy_for,
    looks_like_anthropic_model,
)
from hermes_core.context.hooks import CallContext
from hermes_core.events import StepFinished
from hermes_core.messages import Message
from hermes_core.providers import (
    ModelRequest,
    PromptCachePolicy,
    Provider,
    ProviderConfig,
    create_provider,
)
from hermes_core.providers.base import ApiMode
from hermes_core.providers.cache_markers import (
    MAX_BREAKPOINTS,
    mark_anthropic_body,
    mark_chat_messages,
    system_and_last_3,
)
from hermes_core.providers.chat_completions import build_kwargs as chat_kwargs
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec

EPHEMERAL = {"type": "ephemeral"}
EPHEMERAL_1H = {"type": "ephemeral", "ttl": "1h"}


def markers(value: Any) -> list[Any]:
    """Every ``cache_control`` value anywhere in a request body."""
    found: list[Any] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "cache_control":
                found.append(item)
            else:
                found += markers(item)
    elif isinstance(value, list):
        for item in value:
            found += markers(item)
    return found


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def turns(count: int) -> list[dict[str, Any]]:
    """Alternating user/assistant Anthropic messages with string content."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
        for i in range(count)
    ]


# --- Anthropic body ---------------------------------------------------------------------------


def test_system_and_the_last_three_messages_get_breakpoints() -> None:
    body = {"system": [text("core"), text("memory")], "messages": turns(6)}
    marked = mark_anthropic_body(body)
    assert marked["system"] == [text("core"), text("memory", cache_control=EPHEMERAL)]
    contents = [message["content"] for message in marked["messages"]]
    assert contents[:3] == ["turn 0", "turn 1", "turn 2"]
    assert contents[3:] == [
        [text("turn 3", cache_control=EPHEMERAL)],
        [text("turn 4", cache_control=EPHEMERAL)],
        [text("turn 5", cache_control=EPHEMERAL)],
    ]
    assert len(markers(marked)) == MAX_BREAKPOINTS


@pytest.mark.parametrize("count", range(8))
@pytest.mark.parametrize("system", [True, False])
def test_never_more_than_four_breakpoints(count: int, system: bool) -> None:
    body: dict[str, Any] = {"messages": turns(count)}
    if system:
        body["system"] = [text("sys")]
    found = markers(mark_anthropic_body(body))
    assert len(found) == min(count, 3) + (1 if system else 0)
    assert len(found) <= MAX_BREAKPOINTS


def test_markers_on_tools_and_automatic_caching_count_against_the_limit() -> None:
    body = {
        "tools": [{"name": "a", "input_schema": {}, "cache_control": EPHEMERAL}],
        "cache_control": EPHEMERAL,
        "system": [text("sys")],
        "messages": turns(5),
    }
    marked = mark_anthropic_body(body)
    assert len(markers(marked)) == MAX_BREAKPOINTS
    # The system prompt comes first, then the newest message.
    assert "cache_control" in marked["system"][0]
    assert markers(marked["messages"]) == [EPHEMERAL]
    assert "cache_control" in marked["messages"][-1]["content"][0]


def test_existing_message_markers_are_replaced_not_added() -> None:
    body = {
        "system": [text("sys", cache_control=EPHEMERAL)],
        "messages": [
            {"role": "user", "content": [text(f"u{i}", cache_control=EPHEMERAL)]} for i in range(5)
        ],
    }
    marked = mark_anthropic_body(body)
    assert len(markers(marked)) == MAX_BREAKPOINTS
    assert [markers(m) for m in marked["messages"][:2]] == [[], []]


def test_a_tool_result_turn_carries_the_marker_on_its_last_block() -> None:
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "42"}
    call = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    body: dict[str, Any] = {
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ]
    }
    marked = mark_anthropic_body(body)
    assert marked["messages"][2]["content"] == [{**result, "cache_control": EPHEMERAL}]
    assert marked["messages"][1]["content"][0]["cache_control"] == EPHEMERAL
    # A turn with results and then text is marked on the text, the end of the prefix.
    body["messages"][2]["content"] = [result, text("and a note")]
    marked = mark_anthropic_body(body)
    assert marked["messages"][2]["content"] == [result, text("and a note", cache_control=EPHEMERAL)]


def test_thinking_blocks_and_empty_text_are_passed_over() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "xyz"}
    call = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    body = {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [call, thinking]},
            {"role": "user", "content": [text("")]},
            {"role": "assistant", "content": [redacted]},
        ]
    }
    marked = mark_anthropic_body(body)
    contents = [m["content"] for m in marked["messages"]]
    # The last two messages cannot carry a marker: the two before them take it.
    assert contents[3] == [redacted]
    assert contents[2] == [text("")]
    assert contents[1] == [{**call, "cache_control": EPHEMERAL}, thinking]
    assert contents[0] == [text("first", cache_control=EPHEMERAL)]


def test_marking_never_mutates_the_body() -> None:
    body = {
        "system": [text("sys")],
        "tools": [{"name": "a", "input_schema": {}}],
        "messages": [{"role": "user", "content": [text("a"), text("b")]}, *turns(4)[1:]],
    }
    before = copy.deepcopy(body)
    mark_anthropic_body(body)
    system_and_last_3("1h")(body)
    assert body == before


def test_one_hour_ttl() -> None:
    marked = system_and_last_3("1h")({"system": [text("sys")], "messages": turns(2)})
    assert markers(marked) == [EPHEMERAL_1H] * 3


# --- Chat Completions messages ----------------------------------------------------------------


def _chat_loop() -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Working.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": [text("43")]},
    ]


def test_chat_layout_marks_the_system_and_the_last_three_parts_carrying_messages() -> None:
    messages = _chat_loop()
    before = copy.deepcopy(messages)
    marked = mark_chat_messages(messages)
    assert messages == before
    assert marked[0]["content"] == [text("sys", cache_control=EPHEMERAL)]
    assert marked[1]["content"] == "go"
    # An assistant turn with only tool calls has no part to carry a marker: passed over.
    assert marked[4] == messages[4]
    assert marked[2]["content"] == [text("Working.", cache_control=EPHEMERAL)]
    assert marked[3]["content"] == [text("42", cache_control=EPHEMERAL)]
    assert marked[5]["content"] == [text("43", cache_control=EPHEMERAL)]
    assert len(markers(marked)) == MAX_BREAKPOINTS


def test_chat_layout_can_leave_tool_messages_alone() -> None:
    marked = mark_chat_messages(_chat_loop(), ttl="1h", mark_tool_messages=False)
    assert [m["content"] for m in marked if m["role"] == "tool"] == ["42", [text("43")]]
    assert markers(marked) == [EPHEMERAL_1H] * 3  # system, "Working.", "go"


def test_chat_layout_drops_markers_a_client_sent() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": [text("sys", cache_control=EPHEMERAL)]},
        *[{"role": "user", "content": [text(f"u{i}", cache_control=EPHEMERAL)]} for i in range(4)],
        {"role": "assistant", "content": "ok", "cache_control": EPHEMERAL},
    ]
    marked = mark_chat_messages(messages)
    assert len(markers(marked)) == MAX_BREAKPOINTS
    assert "cache_control" not in marked[-1]


def test_chat_build_kwargs_places_parts_only_when_the_request_asks() -> None:
    internal: list[Message] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
    ]
    plain = chat_kwargs(ModelRequest(messages=internal), model="m")
    assert markers(plain) == []
    cached = ModelRequest(messages=internal, prompt_cache=PromptCachePolicy(ttl="1h"))
    assert markers(chat_kwargs(cached, model="m")) == [EPHEMERAL_1H] * 2


# --- the policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Identity:
    api_mode: ApiMode
    model: str


@pytest.mark.parametrize(
    ("api_mode", "model", "enabled", "expected"),
    [
        ("anthropic_messages", "claude-sonnet-4-5", None, True),
        ("anthropic_messages", "MiniMax-M2", None, True),
        ("chat_completions", "anthropic/claude-opus-4", None, True),
        ("chat_completions", "Claude-3-5-Haiku", None, True),
        ("chat_completions", "gpt-4o", None, False),
        ("chat_completions", "qwen3-coder", True, True),
        ("codex_responses", "gpt-5", None, False),
        ("codex_responses", "claude-sonnet-4-5", True, False),
        ("anthropic_messages", "claude-sonnet-4-5", False, False),
        ("chat_completions", "anthropic/claude-opus-4", False, False),
    ],
)
def test_cache_policy_per_provider(
    api_mode: ApiMode, model: str, enabled: bool | None, expected: bool
) -> None:
    settings = PromptCacheSettings(enabled=enabled, ttl="1h")
    policy = cache_policy_for(_Identity(api_mode, model), settings)
    assert policy == (PromptCachePolicy(ttl="1h") if expected else None)


def test_default_settings_cache_with_a_five_minute_ttl() -> None:
    assert cache_policy_for(_Identity("anthropic_messages", "x")) == PromptCachePolicy(ttl="5m")
    assert looks_like_anthropic_model("openrouter/anthropic/x")
    assert not looks_like_anthropic_model("gpt-4o-mini")


class _Recording(ContextHooks):
    """Inner hooks (compression's place) that CachingContext must still call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def before_call(self, context: CallContext) -> None:
        self.calls.append("before_call")

    def mark_cache(self, request: ModelRequest, *, provider: Provider) -> ModelRequest:
        self.calls.append("mark_cache")
        return request


# --- over HTTP, against the simulator -----------------------------------------------------------

ProviderFactory = Callable[..., Provider]


@pytest.fixture
async def make_provider(simulator: SimulatorServer) -> AsyncIterator[ProviderFactory]:
    made: list[Provider] = []

    def factory(api_mode: ApiMode, model: str) -> Provider:
        suffix = "" if api_mode == "anthropic_messages" else "/v1"
        config = ProviderConfig(
            name=f"sim-{api_mode}",
            model=model,
            api_mode=api_mode,
            base_url=simulator.base_url + suffix,
            api_key=SecretStr("test-key"),
            timeout=10.0,
        )
        provider = create_provider(config)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


async def test_caching_context_decides_for_the_provider_it_is_given(
    make_provider: ProviderFactory,
) -> None:
    context = CachingContext(PromptCacheSettings(ttl="1h"))
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}])
    claude = make_provider("anthropic_messages", "claude-sonnet-4-5")
    marked = context.mark_cache(request, provider=claude)
    assert marked.prompt_cache == PromptCachePolicy(ttl="1h")
    assert request.prompt_cache is None
    # Re-marked for a fallback that must not see cache_control, the policy goes away.
    gpt = make_provider("chat_completions", "gpt-4o")
    assert context.mark_cache(marked, provider=gpt).prompt_cache is None


def _lookup_tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look a record up by its number.",
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"record {arguments['n']}: " + "details " * 20

    return registry


def _tool_loop(simulator: SimulatorServer, model: str, iterations: int) -> None:
    calls = [
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"n": i})]))
        for i in range(iterations)
    ]
    simulator.state.script(model, Scenario(steps=[*calls, Step(reply=Reply(text="Done."))]))


async def _run(agent: Agent) -> list[StepFinished]:
    steps = []
    async for event in agent.run(AgentRequest(user_message="Look up records 0 to 4.")):
        if isinstance(event, StepFinished):
            steps.append(event)
    return steps


async def test_anthropic_tool_loop_reads_its_prefix_from_the_cache(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _tool_loop(simulator, "claude-cache", 5)
    inner = _Recording()
    agent = Agent(
        make_provider("anthropic_messages", "claude-cache"),
        tools=_lookup_tools(),
        context=CachingContext(inner=inner),
    )
    steps = await _run(agent)
    assert len(steps) == 6
    assert inner.calls == ["before_call", "mark_cache"] * 6
    bodies = [record.body for record in simulator.state.requests(scenario="claude-cache")]
    for body in bodies:
        assert 2 <= len(markers(body)) <= MAX_BREAKPOINTS
        assert "cache_control" in body["system"][-1]
        assert "cache_control" in body["messages"][-1]["content"][-1]
    first, *later = [step.usage for step in steps]
    assert first.cache_read_tokens == 0
    assert first.cache_write_tokens == first.input_tokens
    for usage in later:
        # Everything but the two newest turns comes from the cache.
        assert usage.cache_read_tokens > 0.7 * usage.input_tokens
        assert usage.cache_read_tokens + usage.cache_write_tokens == usage.input_tokens


async def test_anthropic_one_hour_ttl_reaches_the_wire(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _tool_loop(simulator, "claude-1h", 1)
    agent = Agent(
        make_provider("anthropic_messages", "claude-1h"),
        tools=_lookup_tools(),
        context=CachingContext(PromptCacheSettings(ttl="1h")),
    )
    steps = await _run(agent)
    assert steps[1].usage.cache_read_tokens > 0
    for record in simulator.state.requests(scenario="claude-1h"):
        assert set(map(str, markers(record.body))) == {str(EPHEMERAL_1H)}


@pytest.mark.parametrize(
    ("api_mode", "model", "marked"),
    [
        ("chat_completions", "anthropic/claude-sonnet-4.5", True),
        ("chat_completions", "gpt-4o", False),
        ("codex_responses", "gpt-5", False),
    ],
)
async def test_openai_wire_markers_only_for_claude_models(
    simulator: SimulatorServer,
    make_provider: ProviderFactory,
    api_mode: ApiMode,
    model: str,
    marked: bool,
) -> None:
    _tool_loop(simulator, model, 2)
    agent = Agent(make_provider(api_mode, model), tools=_lookup_tools(), context=CachingContext())
    steps = await _run(agent)
    assert len(steps) == 3
    bodies = [record.body for record in simulator.state.requests(scenario=model)]
    assert len(bodies) == 3
    for body in bodies:
        found = markers(body)
        if not marked:
            assert found == []
            continue
        assert 2 <= len(found) <= MAX_BREAKPOINTS
        assert body["messages"][0]["content"][-1]["cache_control"] == EPHEMERAL
        assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
