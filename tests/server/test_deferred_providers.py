"""An SDK-backed provider is built after the server answers, and answers as if built at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pydantic import SecretStr

from hermes_core.providers import ModelRequest, ModelResponse
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.fallback import FallbackChain
from server.deferred_providers import DeferredProvider, deferred_in, provider_of, warm_up
from server.simulator import SimulatorServer

REPO = Path(__file__).parents[2]


def _anthropic(simulator: SimulatorServer) -> ProviderConfig:
    return ProviderConfig(
        name="claude",
        model="claude-x",
        api_mode="anthropic_messages",
        base_url=simulator.base_url,  # the Anthropic SDK appends /v1 itself
        api_key=SecretStr("test-key"),
        timeout=10.0,
    )


def _request() -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": "Say hello."}])


async def test_a_deferred_provider_builds_at_its_first_call_and_answers(
    simulator: SimulatorServer,
) -> None:
    provider = provider_of(_anthropic(simulator))
    assert isinstance(provider, DeferredProvider)
    built_before = provider.built
    assert not built_before
    assert (provider.name, provider.api_mode) == ("claude", "anthropic_messages")

    events = [event async for event in provider.stream(_request())]

    assert provider.built
    assert isinstance(events[-1], ModelResponse)
    again = [event async for event in provider.stream(_request())]
    assert isinstance(again[-1], ModelResponse)
    await provider.aclose()


async def test_warm_up_builds_the_deferred_providers_of_the_chains(
    simulator: SimulatorServer,
) -> None:
    chat = ProviderConfig(
        name="sim", model="m", api_mode="chat_completions", base_url=simulator.base_url + "/v1"
    )
    eager = provider_of(chat)
    deferred = provider_of(_anthropic(simulator))
    chain = FallbackChain([eager, deferred])
    assert not isinstance(eager, DeferredProvider)  # no SDK to defer
    assert deferred_in([chain]) == [deferred]

    thread = warm_up(deferred_in([chain]))
    assert thread is not None
    thread.join(timeout=120)

    assert isinstance(deferred, DeferredProvider)
    assert deferred.built
    assert warm_up(deferred_in([chain])) is None  # nothing left to build
    await chain.aclose()


async def test_an_unbuilt_provider_closes_without_building(simulator: SimulatorServer) -> None:
    provider = DeferredProvider(_anthropic(simulator))
    assert not await provider.refresh_credentials()  # its key is read when it is built
    await provider.aclose()
    assert not provider.built


def test_a_start_with_anthropic_and_responses_providers_does_not_import_their_sdks() -> None:
    probe = """
import sys
from hermes_core.providers.config import ProviderConfig
from server.deferred_providers import provider_of
for mode in ("anthropic_messages", "codex_responses"):
    provider_of(ProviderConfig(name=mode, model="m", api_mode=mode, base_url="http://127.0.0.1:9"))
print("anthropic" in sys.modules, "openai" in sys.modules)
"""
    started = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    assert started.stdout.split() == ["False", "False"]
