"""Context compression: cut planning, pruning, summaries, and the hook inside a real agent run."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.context import (
    PRUNED_TOOL_OUTPUT,
    SUMMARY_MARKER,
    CompressingContext,
    CompressionSettings,
    Compressor,
    estimate_tokens,
    plan,
)
from hermes_core.context.compression import prune_tool_outputs
from hermes_core.context.hooks import CallContext
from hermes_core.context.summary import fallback_summary
from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.events import CompressionPerformed, ExitReason, StepFinished
from hermes_core.messages import Message, ToolCall
from hermes_core.providers import Provider, ProviderConfig, create_provider
from hermes_core.providers.base import ApiMode, ModelRequest, ModelResponse, ProviderEvent
from hermes_core.tools.registry import ToolContext, ToolRegistry
from hermes_core.usage import Usage
from server.simulator import Fault, RecordedRequest, Reply, SimulatorServer, Step
from tests.hermes_core.agent.conftest import (
    API_MODES,
    ProviderFor,
    assert_alternation,
    call,
    finished,
    run_events,
    script,
)


@pytest.fixture
async def providers(simulator: SimulatorServer) -> AsyncIterator[ProviderFor]:
    """Providers pointed at the simulator, closed after the test (as in the agent tests)."""
    made: list[Provider] = []

    def factory(api_mode: ApiMode, model: str, **overrides: Any) -> Provider:
        suffix = "" if api_mode == "anthropic_messages" else "/v1"
        settings: dict[str, Any] = {
            "name": f"sim-{api_mode}",
            "model": model,
            "api_mode": api_mode,
            "base_url": simulator.base_url + suffix,
            "api_key": SecretStr("test-key"),
            "timeout": 10.0,
            **overrides,
        }
        made.append(create_provider(ProviderConfig(**settings)))
        return made[-1]

    yield factory
    for provider in made:
        await provider.aclose()
    for record in simulator.state.requests():  # role alternation held in every request
        assert_alternation(record)


# --- transcripts ------------------------------------------------------------------------------


def _call(call_id: str, name: str, arguments: str = "{}") -> ToolCall:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _round(n: int, *, results: int, output: str, text: str = "") -> list[Message]:
    """One assistant tool round: ``results`` parallel calls and their outputs."""
    ids = [f"call_{n}_{i}" for i in range(results)]
    assistant: Message = {
        "role": "assistant",
        "content": text,
        "tool_calls": [_call(i, "lookup", f'{{"item": "{i}"}}') for i in ids],
    }
    return [assistant] + [
        {"role": "tool", "tool_call_id": i, "content": f"result {i}: {output}"} for i in ids
    ]


def _conversation(rng: random.Random, length: int) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": "Start the task."}]
    n = 0
    while len(messages) < length:
        kind = rng.choice(["tools", "tools", "text", "user"])
        last = messages[-1]["role"]
        if kind == "user" and last in ("assistant", "tool"):
            messages.append({"role": "user", "content": "More, please. " * rng.randint(1, 30)})
        elif kind == "text" and last != "assistant":
            messages.append({"role": "assistant", "content": "Noted. " * rng.randint(1, 40)})
        else:
            n += 1
            messages += _round(n, results=rng.randint(1, 4), output="x" * rng.randint(10, 800))
    return messages


def _side(index: int, head_end: int, tail_start: int) -> str:
    return "head" if index < head_end else "middle" if index < tail_start else "tail"


def _assert_pairs_together(messages: Sequence[Message], head_end: int, tail_start: int) -> None:
    owner: dict[str, int] = {}
    for index, message in enumerate(messages):
        for tool_call in message.get("tool_calls") or ():
            owner[tool_call["id"]] = index
        if message["role"] == "tool":
            call_side = _side(owner[str(message["tool_call_id"])], head_end, tail_start)
            assert call_side == _side(index, head_end, tail_start), (index, head_end, tail_start)


def _assert_well_formed(messages: Sequence[Message]) -> None:
    """Every call has its results right after it, no result is orphaned, no two users touch."""
    pending: list[str] = []
    previous = None
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending, message
            pending.remove(str(message["tool_call_id"]))
            continue
        assert not pending, f"calls without results: {pending}"
        assert not (previous == message["role"] == "user"), "two user messages in a row"
        pending = [c["id"] for c in message.get("tool_calls") or ()]
        previous = message["role"]
    assert not pending


# --- estimate and plan ------------------------------------------------------------------------


def test_estimate_counts_text_tool_calls_and_a_per_message_overhead() -> None:
    assert estimate_tokens([]) == 0
    assert estimate_tokens([{"role": "user", "content": "x" * 400}]) == 104
    with_call: Message = {"role": "assistant", "content": None, "tool_calls": [_call("a", "n")]}
    assert estimate_tokens([with_call]) == 4 + 1  # "n" + "{}" is three characters
    parts: Message = {"role": "user", "content": [{"type": "text", "text": "abcd"}]}
    assert estimate_tokens([parts, parts]) == 2 * (4 + 1)


def test_cuts_never_separate_tool_calls_from_their_results() -> None:
    rng = random.Random(7)
    for _ in range(40):
        messages = _conversation(rng, rng.randint(1, 60))
        for first in range(0, 7):
            for last in (0, 1, 3, 8, 20, 100):
                for tail_tokens in (0, 50, 400, 5_000):
                    cuts = plan(
                        messages,
                        protect_first_n=first,
                        protect_last_n=last,
                        tail_tokens=tail_tokens,
                        min_tail_messages=2,
                    )
                    assert 0 <= cuts.head_end <= cuts.tail_start <= len(messages)
                    _assert_pairs_together(messages, cuts.head_end, cuts.tail_start)
                    if cuts.tail_start < len(messages):
                        assert messages[cuts.tail_start]["role"] != "tool"
                    if cuts.has_middle:
                        assert messages[cuts.head_end]["role"] != "tool"
                        assert messages[cuts.head_end - 1]["role"] != "user" or cuts.head_end == 0


def test_head_and_tail_are_protected_and_aligned_to_whole_tool_rounds() -> None:
    messages: list[Message] = [{"role": "user", "content": "Task"}]
    messages += _round(1, results=3, output="a")
    for n in range(2, 12):
        messages += [{"role": "user", "content": f"ask {n}"}, *_round(n, results=2, output="b")]
    cuts = plan(messages, protect_first_n=2, protect_last_n=2, tail_tokens=10_000)
    assert cuts.head_end == 5  # the user, the assistant and all three of its results
    # The last two messages are tool results; the tail reaches back to their call.
    assert cuts.tail_start == len(messages) - 3
    assert messages[cuts.tail_start]["role"] == "assistant"


def test_a_head_ending_on_a_user_message_takes_in_the_next_round() -> None:
    messages: list[Message] = [{"role": "user", "content": "Task"}]
    for n in range(1, 8):
        messages += _round(n, results=1, output="z")
    cuts = plan(messages, protect_first_n=1, protect_last_n=2, tail_tokens=10_000)
    assert cuts.head_end == 3
    assert [m["role"] for m in messages[: cuts.head_end]] == ["user", "assistant", "tool"]


def test_the_tail_keeps_to_its_token_budget_above_its_message_floor() -> None:
    messages: list[Message] = []
    for n in range(30):
        messages += [
            {"role": "user", "content": f"question {n} " + "q" * 396},
            {"role": "assistant", "content": f"answer {n} " + "a" * 396},
        ]
    per_message = estimate_tokens(messages[:1])
    cuts = plan(messages, protect_first_n=2, protect_last_n=20, tail_tokens=per_message * 5)
    assert len(messages) - cuts.tail_start == 5
    assert estimate_tokens(messages[cuts.tail_start :]) <= per_message * 5
    floor = plan(messages, protect_first_n=2, protect_last_n=20, tail_tokens=0, min_tail_messages=4)
    assert len(messages) - floor.tail_start == 4
    generous = plan(messages, protect_first_n=2, protect_last_n=20, tail_tokens=10**9)
    assert len(messages) - generous.tail_start == 20


# --- prune and the deterministic summary ------------------------------------------------------


def test_pruning_replaces_only_large_outputs_before_the_tail() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "go"},
        *_round(1, results=2, output="big " * 200),
        *_round(2, results=1, output="small"),
        *_round(3, results=1, output="big " * 200),
    ]
    pruned, replaced = prune_tool_outputs(
        messages, before=5, placeholder=PRUNED_TOOL_OUTPUT, min_tokens=50
    )
    assert replaced == 2
    assert [m.get("content") for m in pruned if m["role"] == "tool"] == [
        PRUNED_TOOL_OUTPUT,
        PRUNED_TOOL_OUTPUT,
        "result call_2_0: small",
        messages[-1]["content"],
    ]
    assert pruned[2]["tool_call_id"] == "call_1_0"
    assert "big" in str(messages[2]["content"])  # the input is untouched


def test_the_deterministic_summary_lists_requests_tools_and_last_notes() -> None:
    middle: list[Message] = [
        {"role": "user", "content": f"{SUMMARY_MARKER}\nEarlier: the repo was cloned."},
        {"role": "user", "content": "Find the failing test."},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [_call("c1", "run_tests", '{"path": "tests"}')],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "\n1 failed: test_parse\nmore lines"},
        {"role": "assistant", "content": "test_parse fails on empty input."},
    ]
    summary = fallback_summary(middle, max_chars=10_000)
    assert "Earlier: the repo was cloned." in summary
    assert "- Find the failing test." in summary
    assert '- run_tests({"path": "tests"}) → 1 failed: test_parse' in summary
    assert "more lines" not in summary
    assert "- test_parse fails on empty input." in summary
    assert len(fallback_summary(middle * 50, max_chars=300)) <= 300


# --- the compressor with an in-process summariser ---------------------------------------------


class ScriptedSummariser:
    """A real :class:`Provider` that answers every call with one text, or one failure."""

    name = "scripted"
    api_mode: ApiMode = "chat_completions"
    model = "summariser"
    context_window = 32_000

    def __init__(self, answer: str | ProviderError) -> None:
        self.answer = answer
        self.requests: list[ModelRequest] = []

    async def refresh_credentials(self) -> bool:
        return False

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        self.requests.append(request)
        if isinstance(self.answer, ProviderError):
            raise self.answer
        yield ModelResponse(
            message={"role": "assistant", "content": self.answer},
            finish_reason="stop",
            usage=Usage(),
            provider=self.name,
            model=self.model,
        )

    async def aclose(self) -> None:
        return None


def _chatty_history(rounds: int, *, text_chars: int, output_chars: int) -> list[Message]:
    history: list[Message] = [{"role": "user", "content": "Audit the ledger, item by item."}]
    for n in range(1, rounds + 1):
        history += _round(n, results=2 if n % 3 else 1, output="o" * output_chars)
        history += [
            {"role": "assistant", "content": f"Finding {n}: " + "f" * text_chars},
            {"role": "user", "content": f"Continue with item {n + 1}."},
        ]
    return history


async def test_compress_summarises_the_middle_into_one_marked_user_message() -> None:
    summariser = ScriptedSummariser("## Task so far\nAuditing the ledger.")
    compressor = Compressor(summariser, CompressionSettings(protect_last_n=6))
    history = _chatty_history(12, text_chars=800, output_chars=100)
    result = await compressor.compress(history, context_window=8000, target_tokens=1000)
    assert result.summarised
    assert not result.summariser_failed
    assert result.tokens_after < result.tokens_before == estimate_tokens(history)
    summaries = [m for m in result.messages if SUMMARY_MARKER in str(m.get("content"))]
    assert len(summaries) == 1
    assert str(summaries[0]["content"]).startswith(SUMMARY_MARKER)
    assert "Auditing the ledger." in str(summaries[0]["content"])
    assert result.messages[0] == history[0]
    assert result.messages[-1] == history[-1]
    _assert_well_formed(result.messages)
    (request,) = summariser.requests
    assert "## Task so far" in str(request.messages[0].get("content"))
    assert "Finding 1:" in str(request.messages[1].get("content"))


@pytest.mark.parametrize(
    "answer",
    [ProviderError("boom", kind=ErrorKind.SERVER_ERROR, provider="scripted", status_code=500), ""],
)
async def test_a_failing_or_empty_summariser_falls_back_to_the_digest(
    answer: str | ProviderError,
) -> None:
    compressor = Compressor(ScriptedSummariser(answer), CompressionSettings(protect_last_n=6))
    history = _chatty_history(12, text_chars=800, output_chars=100)
    result = await compressor.compress(history, context_window=8000, target_tokens=1000)
    assert result.summarised
    assert result.summariser_failed
    assert result.tokens_after < result.tokens_before
    text = "\n".join(str(m.get("content")) for m in result.messages)
    assert "mechanical digest" in text
    assert "Continue with item 2." in text
    _assert_well_formed(result.messages)


async def test_pruning_alone_is_enough_when_tool_outputs_are_the_bulk() -> None:
    summariser = ScriptedSummariser("unused")
    compressor = Compressor(summariser, CompressionSettings(protect_last_n=6))
    history = _chatty_history(12, text_chars=20, output_chars=3000)
    result = await compressor.compress(history, context_window=8000, target_tokens=3000)
    assert not result.summarised
    assert result.pruned > 0
    assert result.tokens_after <= 3000 < result.tokens_before
    assert summariser.requests == []
    assert len(result.messages) == len(history)


# --- the hook ---------------------------------------------------------------------------------


class _Window:
    """Just enough of a provider for a :class:`CallContext`: its context window."""

    name = "window"
    api_mode: ApiMode = "chat_completions"
    model = "window"

    def __init__(self, context_window: int) -> None:
        self.context_window = context_window

    async def refresh_credentials(self) -> bool:
        return False

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        raise AssertionError("the hook never calls the main model")

    async def aclose(self) -> None:
        return None


def _context(
    transcript: list[Message], *, window: int, between: bool, real: int | None
) -> CallContext:
    return CallContext(
        transcript=transcript,
        provider=_Window(window),
        last_prompt_tokens=real,
        session_id="sess",
        between_turns=between,
    )


async def test_the_first_call_of_a_turn_uses_the_between_turns_threshold() -> None:
    history = _chatty_history(12, text_chars=800, output_chars=100)
    tokens = estimate_tokens(history)
    hook = CompressingContext(Compressor(None))
    window = int(tokens / 0.7)  # 70 %: over 50 %, under 85 %
    transcript = list(history)
    assert (
        await hook.before_call(_context(transcript, window=window, between=True, real=None)) is None
    )
    assert transcript == history
    done = await hook.before_call(_context(transcript, window=window, between=False, real=None))
    assert done is not None
    assert done.tokens_before == tokens
    assert done.tokens_after < tokens
    assert (done.parent_session_id, done.session_id) == ("sess", "sess.c1")
    assert done.summarised is True
    assert done.summariser_call is None  # no summariser: the deterministic digest
    assert done.messages_before == len(history) > len(transcript)


async def test_the_real_prompt_count_wins_and_lineage_chains_from_the_child() -> None:
    history = _chatty_history(12, text_chars=800, output_chars=100)
    hook = CompressingContext(Compressor(None), session_ids=lambda parent: f"{parent}+")
    window = estimate_tokens(history) * 3  # the estimate alone is far under the threshold
    transcript = list(history)
    assert (
        await hook.before_call(_context(transcript, window=window, between=False, real=None))
        is None
    )
    transcript.append({"role": "assistant", "content": "More."})
    # The upstream counted far more (a long system prompt, many tool schemas): compress.
    first = await hook.before_call(_context(transcript, window=window, between=False, real=window))
    assert first is not None
    added = estimate_tokens(transcript[-1:])
    assert first.tokens_before == window + added
    assert (first.parent_session_id, first.session_id) == ("sess", "sess+")
    assert hook.current_session("sess") == "sess+"
    transcript += _chatty_history(6, text_chars=800, output_chars=100)[1:]
    second = await hook.before_call(_context(transcript, window=window, between=False, real=window))
    assert second is not None
    assert (second.parent_session_id, second.session_id) == ("sess+", "sess++")


async def test_nothing_happens_when_nothing_can_be_compressed() -> None:
    hook = CompressingContext(Compressor(None))
    transcript: list[Message] = [{"role": "user", "content": "x" * 8000}]
    assert (
        await hook.before_call(_context(transcript, window=100, between=False, real=None)) is None
    )
    assert transcript == [{"role": "user", "content": "x" * 8000}]


# --- a real agent run against the simulator ---------------------------------------------------

MAIN, SUMMARISER = "compress-main", "compress-summariser"


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        description="Look an item up.",
        parameters={"type": "object", "properties": {"item": {"type": "string"}}},
    )
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return f"item {arguments.get('item')}: balanced"

    return registry


def _agent(providers: ProviderFor, mode: ApiMode, window: int) -> Agent:
    summariser = providers("chat_completions", SUMMARISER)
    return Agent(
        providers(mode, MAIN, context_window=window),
        tools=_tools(),
        config=AgentConfig(core_instructions="Be brief."),
        context=CompressingContext(Compressor(summariser)),
    )


def _calls_and_results(record: RecordedRequest) -> tuple[list[str], list[str]]:
    """Tool call ids and tool result ids of a request, whatever its wire format."""
    calls: list[str] = []
    results: list[str] = []
    body = record.body
    if record.api == "chat_completions":
        for message in body["messages"]:
            calls += [c["id"] for c in message.get("tool_calls") or ()]
            if message["role"] == "tool":
                results.append(message["tool_call_id"])
    elif record.api == "responses":
        for item in body["input"]:
            if item.get("type") == "function_call":
                calls.append(item["call_id"])
            elif item.get("type") == "function_call_output":
                results.append(item["call_id"])
    else:
        for message in body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block.get("type") == "tool_use":
                    calls.append(block["id"])
                elif block.get("type") == "tool_result":
                    results.append(block["tool_use_id"])
    return calls, results


def _compression(events: Sequence[object]) -> list[CompressionPerformed]:
    return [e for e in events if isinstance(e, CompressionPerformed)]


@pytest.mark.parametrize("api_mode", API_MODES)
async def test_a_long_history_is_summarised_before_the_call_and_the_run_completes(
    simulator: SimulatorServer, providers: ProviderFor, api_mode: ApiMode
) -> None:
    script(simulator, SUMMARISER, Step(reply=Reply(text="## Task so far\nLedger audit, 12 items.")))
    script(simulator, MAIN, Step(reply=Reply(text="All items are balanced.")))
    history = _chatty_history(12, text_chars=1500, output_chars=100)
    window = int(estimate_tokens(history) / 0.9)  # over 85 % before the first call
    agent = _agent(providers, api_mode, window)
    wrap_up = AgentRequest(user_message="Wrap up.", history=history, session_id="task-compress")
    events = await run_events(agent, wrap_up)
    (compression,) = _compression(events)
    assert compression.summarised
    assert compression.tokens_after < compression.tokens_before
    assert compression.parent_session_id == "task-compress"
    assert compression.session_id == "task-compress.c1"
    assert compression.messages_after < compression.messages_before
    done = finished(events)
    assert (done.exit_reason, done.final_text) == (ExitReason.COMPLETED, "All items are balanced.")
    # The run ended in the child session, and the summary's call is part of its cost.
    assert (done.session_id, done.transcript_length) == (
        "task-compress.c1",
        compression.messages_after + 1,
    )
    summary_call = compression.summariser_call
    assert summary_call is not None
    assert summary_call.usage.input_tokens > 0
    assert done.calls[0] == summary_call
    assert done.usage == sum((call.usage for call in done.calls), Usage())
    assert done.model_calls == 1  # model calls of the loop; the summary's is not budgeted
    (summarising,) = simulator.state.requests(scenario=SUMMARISER)
    assert "Finding 1:" in str(summarising.body)
    assert "stream" not in summarising.body  # nobody watches a summary being written
    (request,) = simulator.state.requests(scenario=MAIN)
    assert SUMMARY_MARKER in str(request.body)
    assert "Ledger audit, 12 items." in str(request.body)
    assert "Finding 1:" not in str(request.body)
    calls, results = _calls_and_results(request)
    assert calls
    assert sorted(calls) == sorted(results)


async def test_the_real_prompt_count_triggers_compression_within_a_turn(
    simulator: SimulatorServer, providers: ProviderFor
) -> None:
    script(simulator, SUMMARISER, Step(reply=Reply(text="## Task so far\nAudit underway.")))
    script(
        simulator,
        MAIN,
        Step(reply=Reply(tool_calls=[call("lookup", item="13")])),
        Step(reply=Reply(text="Item 13 is balanced too.")),
    )
    history = _chatty_history(12, text_chars=600, output_chars=100)
    # By estimate the history is at 45 % of the window; the tool schemas and the system prompt
    # push the real count of the second call over 50 %.
    window = int(estimate_tokens(history) / 0.45)
    agent = _agent(providers, "chat_completions", window)
    events = await run_events(agent, AgentRequest(user_message="Next.", history=history))
    (compression,) = _compression(events)
    first, second = simulator.state.requests(scenario=MAIN)
    assert SUMMARY_MARKER not in str(first.body)
    assert SUMMARY_MARKER in str(second.body)
    first_step = next(e for e in events if isinstance(e, StepFinished))
    assert compression.tokens_before > first_step.usage.input_tokens > int(window * 0.5)
    assert estimate_tokens(compression.messages) < estimate_tokens(history)
    calls, results = _calls_and_results(second)
    assert sorted(calls) == sorted(results)
    assert "item 13: balanced" in str(second.body)  # the newest tool round stays verbatim
    assert finished(events).final_text == "Item 13 is balanced too."


async def test_a_failing_summariser_falls_back_and_the_run_still_completes(
    simulator: SimulatorServer, providers: ProviderFor
) -> None:
    script(simulator, SUMMARISER, Step(fault=Fault(status=500), repeat=5))
    script(simulator, MAIN, Step(reply=Reply(text="Done.")))
    history = _chatty_history(12, text_chars=1500, output_chars=100)
    agent = _agent(providers, "chat_completions", int(estimate_tokens(history) / 0.9))
    events = await run_events(agent, AgentRequest(user_message="Wrap up.", history=history))
    (compression,) = _compression(events)
    assert compression.summarised
    assert len(simulator.state.requests(scenario=SUMMARISER)) == 1
    (request,) = simulator.state.requests(scenario=MAIN)
    assert "mechanical digest" in str(request.body)
    assert "Continue with item 2." in str(request.body)
    assert finished(events).exit_reason is ExitReason.COMPLETED


async def test_pruning_old_tool_outputs_alone_avoids_a_summary(
    simulator: SimulatorServer, providers: ProviderFor
) -> None:
    script(simulator, MAIN, Step(reply=Reply(text="Done.")))
    history = _chatty_history(12, text_chars=20, output_chars=3000)
    agent = _agent(providers, "chat_completions", int(estimate_tokens(history) / 0.9))
    events = await run_events(agent, AgentRequest(user_message="Wrap up.", history=history))
    (compression,) = _compression(events)
    assert not compression.summarised
    assert compression.messages_after == compression.messages_before
    assert simulator.state.requests(scenario=SUMMARISER) == []
    (request,) = simulator.state.requests(scenario=MAIN)
    assert PRUNED_TOOL_OUTPUT in str(request.body)
    assert SUMMARY_MARKER not in str(request.body)
    assert finished(events).exit_reason is ExitReason.COMPLETED
