"""Retries and fallback in real runs: the conversation survives failing upstreams."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hermes_core.agent import Agent, AgentConfig, AgentRequest
from hermes_core.events import ExitReason, FallbackActivated, RetryScheduled
from hermes_core.providers import Provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from hermes_core.tools.registry import ToolContext, ToolRegistry
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.agent.conftest import (
    ProviderFor,
    body_text,
    call,
    finished,
    run_events,
    script,
    sent,
)

FAST = RetryPolicy(base_delay=0.01, max_delay=0.05)


def _chain(*providers: Provider, cooldowns: Cooldowns | None = None) -> FallbackChain:
    return FallbackChain(list(providers), retry=FAST, cooldowns=cooldowns or Cooldowns())


def _tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(description="Look something up.", parameters={"type": "object"})
    async def lookup(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return "lookup result: 1234"

    return registry


async def test_a_429_is_retried_after_its_retry_after_delay(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(
        simulator,
        "limited",
        Step(fault=Fault(status=429, retry_after=1)),
        Step(reply=Reply(text="Finally.")),
    )
    agent = Agent(_chain(provider_for("chat_completions", "limited")))
    started = time.monotonic()
    events = await run_events(agent, AgentRequest(user_message="hi"))
    elapsed = time.monotonic() - started
    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert [(r.attempt, r.delay_s, r.reason) for r in retries] == [(1, 1.0, "rate_limit")]
    assert elapsed >= 0.95
    assert finished(events).final_text == "Finally."
    first, second = simulator.state.requests(scenario="limited")
    assert second.started_at - first.started_at >= 0.95


async def test_a_persistent_503_fails_over_and_the_run_completes_on_the_secondary(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(
        simulator,
        "primary",
        Step(reply=Reply(tool_calls=[call("lookup")])),
        Step(fault=Fault(status=503), repeat=10),
    )
    script(simulator, "secondary", Step(reply=Reply(text="The result was 1234.")))
    primary = provider_for("chat_completions", "primary", name="primary")
    secondary = provider_for("codex_responses", "secondary", name="secondary")
    agent = Agent(_chain(primary, secondary), tools=_tools())
    events = await run_events(agent, AgentRequest(user_message="Look it up."))
    end = finished(events)
    assert end.exit_reason is ExitReason.COMPLETED
    assert end.final_text == "The result was 1234."
    switches = [(e.from_provider, e.to_provider, e.reason) for e in events
                if isinstance(e, FallbackActivated)]  # fmt: skip
    assert switches == [("primary", "secondary", "server_error")]
    assert len(sent(simulator, "primary")) == 1 + FAST.max_attempts
    # The secondary received the whole conversation, tool call and result included.
    (continued,) = sent(simulator, "secondary")
    text = body_text(continued)
    assert "Look it up." in text
    assert "lookup result: 1234" in text
    assert [(c.provider, c.model) for c in end.calls][-1] == ("secondary", "secondary")


async def test_a_401_rereads_the_key_once_and_continues_when_it_changed(
    simulator: SimulatorServer, provider_for: ProviderFor, tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("old-key\n")
    simulator.state.script("rotated", Scenario(api_key="new-key", steps=[Step()]))
    provider = provider_for("chat_completions", "rotated", api_key=None, api_key_file=str(key_file))
    key_file.write_text("new-key\n")  # rotated after the provider read it
    agent = Agent(_chain(provider))
    result = await agent.run_conversation("hi")
    assert result["exit_reason"] == "completed"
    seen = [r.headers["authorization"] for r in simulator.state.requests(scenario="rotated")]
    assert seen == ["Bearer old-key", "Bearer new-key"]


async def test_a_401_with_an_unchanged_key_fails_over_without_retrying(
    simulator: SimulatorServer, provider_for: ProviderFor, tmp_path: Path
) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("stale-key")
    simulator.state.script("locked", Scenario(api_key="other-key", steps=[Step()]))
    script(simulator, "spare", Step(reply=Reply(text="From the spare.")))
    primary = provider_for(
        "anthropic_messages", "locked", name="locked", api_key=None, api_key_file=str(key_file)
    )
    spare = provider_for("chat_completions", "spare", name="spare")
    agent = Agent(_chain(primary, spare))
    events = await run_events(agent, AgentRequest(user_message="hi"))
    assert finished(events).final_text == "From the spare."
    assert [e.reason for e in events if isinstance(e, FallbackActivated)] == ["auth"]
    assert len(simulator.state.requests(scenario="locked")) == 1


async def test_a_rate_limited_primary_is_skipped_on_the_next_run_while_it_cools_down(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    # A long Retry-After sets a long cooldown; one attempt per provider keeps the test fast.
    script(simulator, "hot", Step(fault=Fault(status=429, retry_after=30), repeat=10))
    script(simulator, "cold", Step(reply=Reply(text="one")), Step(reply=Reply(text="two")))
    cooldowns = Cooldowns()
    chain = FallbackChain(
        [
            provider_for("chat_completions", "hot", name="hot"),
            provider_for("chat_completions", "cold", name="cold"),
        ],
        retry=RetryPolicy(max_attempts=1),
        cooldowns=cooldowns,
    )
    first = await Agent(chain).run_conversation("first")
    requests_to_hot = len(simulator.state.requests(scenario="hot"))
    assert first["final_response"] == "one"
    assert cooldowns.is_cooling("hot")
    second = await Agent(chain).run_conversation("second")
    assert second["final_response"] == "two"
    assert len(simulator.state.requests(scenario="hot")) == requests_to_hot
    assert second["calls"][0]["provider"] == "cold"


async def test_anthropic_to_openai_fallback_and_back_keeps_tool_history_valid(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    # Turn 1: Anthropic calls a tool (with thinking), then fails; the OpenAI secondary finishes.
    script(
        simulator,
        "claude",
        Step(reply=Reply(reasoning="Check first.", tool_calls=[call("lookup")])),
        Step(fault=Fault(status=529), repeat=3),
        Step(reply=Reply(text="Back on Claude.")),
    )
    script(
        simulator,
        "gpt",
        Step(reply=Reply(tool_calls=[call("lookup")])),
        Step(reply=Reply(text="Done on GPT.")),
    )
    chain = _chain(
        provider_for("anthropic_messages", "claude", name="claude"),
        provider_for("chat_completions", "gpt", name="gpt"),
    )
    agent = Agent(chain, tools=_tools())
    first = await agent.run_conversation("Look it up twice.")
    assert first["final_response"] == "Done on GPT."
    # Turn 2 starts on the primary again, with tool history produced by both providers.
    second = await agent.run_conversation("And now?", conversation_history=first["messages"])
    assert second["final_response"] == "Back on Claude."
    assert second["calls"][0]["provider"] == "claude"
    # Anthropic's signed thinking is never sent to the OpenAI provider.
    assert all("signature" not in body_text(body) for body in sent(simulator, "gpt"))


async def test_when_every_provider_fails_the_error_names_the_last_failure(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "a", Step(fault=Fault(status=500, message="a exploded"), repeat=5))
    script(simulator, "b", Step(fault=Fault(status=403, message="b forbids it"), repeat=5))
    chain = _chain(
        provider_for("chat_completions", "a", name="a"),
        provider_for("chat_completions", "b", name="b"),
    )
    result = await Agent(chain).run_conversation("hi")
    assert result["exit_reason"] == "failed"
    assert "every provider failed (a, b)" in result["error"]
    assert "403" in result["error"]
    assert "b forbids it" in result["error"]


async def test_an_invalid_request_is_neither_retried_nor_failed_over(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "picky", Step(fault=Fault(status=400, message="bad field"), repeat=3))
    script(simulator, "unused", Step(reply=Reply(text="never")))
    chain = _chain(
        provider_for("chat_completions", "picky", name="picky"),
        provider_for("chat_completions", "unused", name="unused"),
    )
    result = await Agent(chain).run_conversation("hi")
    assert result["exit_reason"] == "failed"
    assert len(simulator.state.requests(scenario="picky")) == 1
    assert simulator.state.requests(scenario="unused") == []


async def test_an_interrupt_during_a_backoff_ends_the_run_at_once(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "sleepy", Step(fault=Fault(status=503, retry_after=30), repeat=3))
    agent = Agent(
        FallbackChain([provider_for("chat_completions", "sleepy")], cooldowns=Cooldowns())
    )
    started = time.monotonic()
    async for event in agent.run(AgentRequest(user_message="hi")):
        if isinstance(event, RetryScheduled):
            agent.interrupt("stop waiting")
        last = event
    assert time.monotonic() - started < 3
    assert last.kind == "run_finished"
    assert last.exit_reason is ExitReason.INTERRUPTED


async def test_a_failure_after_output_was_streamed_is_not_retried(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    reply = Reply(text="partial answer that breaks", chunk_count=6)
    script(simulator, "cut", Step(reply=reply, fault=Fault(disconnect_after=4)), Step())
    agent = Agent(_chain(provider_for("chat_completions", "cut")))
    result = await agent.run_conversation("hi")
    assert result["exit_reason"] == "failed"
    assert len(simulator.state.requests(scenario="cut")) == 1
    assert result["final_response"].startswith("partial")


async def test_a_bare_provider_gets_the_agent_retry_policy(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "flaky", Step(fault=Fault(status=502)), Step(reply=Reply(text="ok")))
    agent = Agent(provider_for("chat_completions", "flaky"), config=AgentConfig(retry=FAST))
    assert await agent.chat("hi") == "ok"


async def test_a_retry_after_beyond_the_cap_fails_over_at_once_instead_of_waiting(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "hour", Step(fault=Fault(status=429, retry_after=3600), repeat=5))
    script(simulator, "other", Step(reply=Reply(text="From the other one.")))
    chain = _chain(
        provider_for("chat_completions", "hour", name="hour"),
        provider_for("chat_completions", "other", name="other"),
    )
    started = time.monotonic()
    events = await run_events(Agent(chain), AgentRequest(user_message="hi"))

    assert time.monotonic() - started < 10
    assert finished(events).final_text == "From the other one."
    assert len(simulator.state.requests(scenario="hour")) == 1
    assert not [e for e in events if isinstance(e, RetryScheduled)]


async def test_a_primary_that_does_not_start_answering_fails_over_after_one_first_byte_timeout(
    simulator: SimulatorServer, provider_for: ProviderFor
) -> None:
    script(simulator, "mute", Step(fault=Fault(first_byte_delay=30), repeat=5))
    script(simulator, "talker", Step(reply=Reply(text="Here.")))
    chain = FallbackChain(
        [
            provider_for("chat_completions", "mute", name="mute"),
            provider_for("anthropic_messages", "talker", name="talker"),
        ],
        retry=RetryPolicy(base_delay=0.01, first_byte_timeout=0.5),
        cooldowns=Cooldowns(),
    )
    started = time.monotonic()
    events = await run_events(Agent(chain), AgentRequest(user_message="hi"))

    assert time.monotonic() - started < 10, "it waited out the mute provider"
    assert finished(events).final_text == "Here."
    assert [e.reason for e in events if isinstance(e, FallbackActivated)] == ["timeout"]
    assert len(simulator.state.requests(scenario="mute")) == 1


async def test_a_cooling_provider_is_probed_and_back_in_first_place_once_it_answers(
    simulator: SimulatorServer, provider_for: ProviderFor, monkeypatch: Any
) -> None:
    script(
        simulator,
        "flaky",
        Step(fault=Fault(status=429, retry_after=3600)),
        Step(reply=Reply(text="flaky is back")),
        Step(reply=Reply(text="flaky again")),
    )
    script(simulator, "steady", Step(reply=Reply(text="steady")))
    cooldowns = Cooldowns()
    chain = FallbackChain(
        [
            provider_for("chat_completions", "flaky", name="flaky"),
            provider_for("chat_completions", "steady", name="steady"),
        ],
        retry=FAST,
        cooldowns=cooldowns,
    )
    assert (await Agent(chain).run_conversation("one"))["final_response"] == "steady"
    assert cooldowns.is_cooling("flaky")

    # Half a minute on, one turn probes the cooling provider; it answers, so it is back.
    clock = time.monotonic() + 31
    monkeypatch.setattr("hermes_core.providers.retry.time.monotonic", lambda: clock)
    assert (await Agent(chain).run_conversation("two"))["final_response"] == "flaky is back"
    assert not cooldowns.is_cooling("flaky")
    assert (await Agent(chain).run_conversation("three"))["final_response"] == "flaky again"
