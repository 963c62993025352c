"""How long a chain waits on an upstream's Retry-After (hermes_core/providers/fallback.py,
retry.py), over real HTTP against the simulator answering 429s."""

from __future__ import annotations

import time

import pytest

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers import Provider, ProviderEvent
from hermes_core.providers.base import ModelResponse, ProviderRetry, ProviderSwitched
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.providers.conftest import ProviderFactory, user

CAP = RetryPolicy(max_retry_after=1.0, base_delay=0.01, max_delay=0.05)
"""A 1 s cap on Retry-After waits, so a test waits it for real in about a second."""


def _rate_limited(simulator: SimulatorServer, model: str, retry_after: float) -> None:
    step = Step(fault=Fault(status=429, retry_after=retry_after), repeat=10)
    simulator.state.script(model, Scenario(steps=[step]))


class _Sleeps:
    """A chain's sleep that records the waits instead of waiting them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


async def _drain(chain: FallbackChain) -> list[ProviderEvent]:
    """The events of one call on ``chain``, until it answers or raises."""
    return [event async for event in chain.stream(user("hi"))]


async def _until_it_gives_up(chain: FallbackChain) -> tuple[list[ProviderEvent], ProviderError]:
    """The events of one call on ``chain`` that must fail, and its failure."""
    events: list[ProviderEvent] = []
    try:
        async for event in chain.stream(user("hi")):
            events.append(event)
    except ProviderError as failure:
        return events, failure
    pytest.fail("the call succeeded")


def _retry_delays(events: list[ProviderEvent]) -> list[float]:
    return [event.delay_s for event in events if isinstance(event, ProviderRetry)]


async def test_a_retry_after_of_120_s_on_the_only_provider_ends_the_wait_within_the_cap(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _rate_limited(simulator, "busy", retry_after=120)
    only = make_provider("chat_completions", "busy", name="only")
    chain = FallbackChain([only], retry=CAP, cooldowns=Cooldowns())

    started = time.monotonic()
    events, failure = await _until_it_gives_up(chain)
    elapsed = time.monotonic() - started

    assert failure.kind is ErrorKind.RATE_LIMIT
    assert _retry_delays(events) == [1.0]  # the cap once, then it gives up
    assert 0.9 <= elapsed < 20, "it waited for the Retry-After, not the cap"
    first, second = simulator.state.requests(scenario="busy")
    assert second.started_at - first.started_at >= 0.9


async def test_the_cap_bounds_all_retry_after_waits_of_the_last_provider_together(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _rate_limited(simulator, "busy", retry_after=0.6)
    sleeps = _Sleeps()
    policy = RetryPolicy(max_attempts=5, max_retry_after=1.0, base_delay=0.01)
    chain = FallbackChain(
        [make_provider("chat_completions", "busy", name="only")],
        retry=policy,
        cooldowns=Cooldowns(),
        sleep=sleeps,
    )
    await _until_it_gives_up(chain)

    assert sleeps.waits == pytest.approx([0.6, 0.4])
    assert len(simulator.state.requests(scenario="busy")) == 3


async def test_a_retry_after_beyond_what_is_left_of_the_cap_fails_over_at_once(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    _rate_limited(simulator, "busy", retry_after=0.6)
    simulator.state.script("spare", Scenario(steps=[Step(reply=Reply(text="From the spare."))]))
    sleeps = _Sleeps()
    chain = FallbackChain(
        [
            make_provider("chat_completions", "busy", name="busy"),
            make_provider("anthropic_messages", "spare", name="spare"),
        ],
        retry=RetryPolicy(max_attempts=5, max_retry_after=1.0, base_delay=0.01),
        cooldowns=Cooldowns(),
        sleep=sleeps,
    )
    events = await _drain(chain)

    assert sleeps.waits == pytest.approx([0.6])  # 0.4 s left: not worth another 0.6 s
    assert [e.to_provider for e in events if isinstance(e, ProviderSwitched)] == ["spare"]
    assert isinstance(events[-1], ModelResponse)
    assert events[-1].message["content"] == "From the spare."


async def test_backoff_without_retry_after_is_not_limited_by_the_retry_after_cap(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    steps = [Step(fault=Fault(status=503), repeat=2), Step(reply=Reply(text="Up again."))]
    simulator.state.script("flaky", Scenario(steps=steps))
    sleeps = _Sleeps()
    only: Provider = make_provider("codex_responses", "flaky", name="only")
    policy = RetryPolicy(max_retry_after=0.0, base_delay=0.01, jitter=False)
    chain = FallbackChain([only], retry=policy, cooldowns=Cooldowns(), sleep=sleeps)

    events = await _drain(chain)

    assert sleeps.waits == [0.01, 0.02]
    assert isinstance(events[-1], ModelResponse)
