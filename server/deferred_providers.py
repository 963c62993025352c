"""Providers whose SDK loads once the server answers, not before (#27: cold start ≤ 1 s).

An Anthropic Messages or Responses provider imports its SDK when built (anthropic ~0.9 s of
CPU, openai ~0.3 s), which a start paid before ``/health`` could answer. A
:class:`DeferredProvider` stands in for one: it knows its name, model and context window from
the configuration, and builds the real adapter on a worker thread — ahead of time once
:func:`warm_up` is called (``serve`` calls it as it starts listening), else at its first
call. A request arriving meanwhile waits for that build; the event loop never does.

The Chat Completions adapter is built at once: it imports no SDK (aiohttp is loaded anyway).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterable

from hermes_core.providers import ApiMode, ModelRequest, Provider, ProviderEvent, create_provider
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.fallback import FallbackChain

log = logging.getLogger("hermes.bootstrap")

SDK_MODES: frozenset[ApiMode] = frozenset({"anthropic_messages", "codex_responses"})
"""The api_modes whose adapter imports an SDK."""


class DeferredProvider:
    """The provider of ``config``, built on a worker thread by :meth:`build` or first use."""

    def __init__(self, config: ProviderConfig) -> None:
        self._config = config
        self._built: Provider | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def api_mode(self) -> ApiMode:
        return self._config.resolved_api_mode

    @property
    def model(self) -> str:
        return self._config.model

    @property
    def context_window(self) -> int:
        return self._config.context_window

    @property
    def built(self) -> bool:
        return self._built is not None

    def build(self) -> Provider:
        """The adapter, built now unless it is already (blocking: call it off the loop)."""
        with self._lock:
            if self._built is None:
                self._built = create_provider(self._config)
            return self._built

    async def _provider(self) -> Provider:
        built = self._built
        return built if built is not None else await asyncio.to_thread(self.build)

    async def refresh_credentials(self) -> bool:
        # Not built yet: the key is read when it is, so no other key is in use.
        built = self._built
        return False if built is None else await built.refresh_credentials()

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        built = self._built
        # Built: the adapter's own iterator, so closing it closes the upstream call as ever.
        return built.stream(request) if built is not None else self._stream_once_built(request)

    async def _stream_once_built(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        events = (await self._provider()).stream(request)
        try:
            async for event in events:
                yield event
        finally:
            closing = getattr(events, "aclose", None)
            if closing is not None:
                await closing()

    async def aclose(self) -> None:
        built = self._built
        if built is None and self._lock.locked():
            built = await asyncio.to_thread(self.build)  # a build in progress: let it end
        if built is not None:
            await built.aclose()


def provider_of(config: ProviderConfig) -> Provider:
    """``config``'s adapter, deferred when it would import an SDK."""
    if config.resolved_api_mode in SDK_MODES:
        return DeferredProvider(config)
    return create_provider(config)


def deferred_in(chains: Iterable[Provider]) -> list[DeferredProvider]:
    """The deferred providers of ``chains`` (fallback chains or single providers)."""
    found: list[DeferredProvider] = []
    for chain in chains:
        members = chain.providers if isinstance(chain, FallbackChain) else [chain]
        found += [p for p in members if isinstance(p, DeferredProvider)]
    return found


def warm_up(providers: Iterable[DeferredProvider]) -> threading.Thread | None:
    """Build ``providers`` on a daemon thread, so that a first request finds them built; None
    when there is nothing to build."""
    pending = [p for p in providers if not p.built]
    if not pending:
        return None

    def build_all() -> None:
        for provider in pending:
            try:
                provider.build()
            except Exception:  # the request that needs it will build it again and answer why
                log.exception(
                    "provider %s could not be built ahead of its first use", provider.name
                )

    thread = threading.Thread(target=build_all, name="hermes-provider-warm-up", daemon=True)
    thread.start()
    return thread
