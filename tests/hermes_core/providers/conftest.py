"""Helpers for adapter tests: providers pointed at the simulator, and event collection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.providers import ModelRequest, Provider, ProviderEvent, create_provider
from hermes_core.providers.base import ApiMode, ModelResponse
from hermes_core.providers.config import ProviderConfig
from server.simulator import SimulatorServer

ProviderFactory = Callable[..., Provider]
API_KEY = "test-key"
"""The key every provider from ``make_provider`` sends (unless overridden)."""


@pytest.fixture
async def make_provider(simulator: SimulatorServer) -> AsyncIterator[ProviderFactory]:
    """Build providers of any api_mode aimed at the simulator; all are closed afterwards."""
    made: list[Provider] = []

    def factory(api_mode: ApiMode, model: str, **overrides: Any) -> Provider:
        # The Anthropic SDK appends /v1 itself; the OpenAI SDK wants it in the base URL.
        suffix = "" if api_mode == "anthropic_messages" else "/v1"
        settings: dict[str, Any] = {
            "name": f"sim-{api_mode}",
            "model": model,
            "api_mode": api_mode,
            "base_url": simulator.base_url + suffix,
            "api_key": SecretStr(API_KEY),
            "timeout": 10.0,
        }
        settings.update(overrides)
        provider = create_provider(ProviderConfig(**settings))
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        await provider.aclose()


async def collect(provider: Provider, request: ModelRequest) -> list[ProviderEvent]:
    return [event async for event in provider.stream(request)]


def final(events: list[ProviderEvent]) -> ModelResponse:
    last = events[-1]
    assert isinstance(last, ModelResponse)
    return last


def user(text: str) -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": text}])
