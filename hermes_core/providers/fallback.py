"""Retries and provider fallback: the conversation continues when an upstream fails.

A :class:`FallbackChain` is an ordered list of providers. Each turn of a conversation uses it
through a :class:`ChainTurn`, which starts on the first provider that is not cooling down and
stays on whichever provider last worked until the turn ends — fallback is turn-scoped.

For one model call, the turn tries its current provider: transient failures (429, 5xx,
timeouts, dropped connections) are retried with backoff, honouring Retry-After; a 401/403 makes
the provider re-read its key once. When the provider still fails with a failure another
provider could avoid, the next one in the chain takes over with the same request — the internal
message format converts to any api_mode — and a ``ProviderSwitched`` event says so. A failure
after output was streamed is never retried: the client already saw that output.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers.base import (
    ApiMode,
    ModelReasoningDelta,
    ModelRequest,
    ModelTextDelta,
    Provider,
    ProviderEvent,
    ProviderRetry,
    ProviderSwitched,
    ToolCallDelta,
)
from hermes_core.providers.retry import PROCESS_COOLDOWNS, Cooldowns, RetryPolicy

# Failures another provider may not have. Not here: invalid requests and context overflow,
# which any provider would refuse the same way.
FALLBACK_KINDS = frozenset(
    {
        ErrorKind.RATE_LIMIT,
        ErrorKind.SERVER_ERROR,
        ErrorKind.TIMEOUT,
        ErrorKind.CONNECTION,
        ErrorKind.AUTH,
        ErrorKind.FORBIDDEN,
        ErrorKind.NOT_FOUND,
        ErrorKind.INVALID_RESPONSE,
    }
)
_OUTPUT = (ModelTextDelta, ModelReasoningDelta, ToolCallDelta)

Sleep = Callable[[float], Awaitable[None]]
Adapt = Callable[[ModelRequest, Provider], ModelRequest]


class FallbackChain:
    """Providers in order of preference. Also a Provider: each call is a one-call turn."""

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        retry: RetryPolicy | None = None,
        cooldowns: Cooldowns = PROCESS_COOLDOWNS,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not providers:
            raise ValueError("a fallback chain needs at least one provider")
        self.providers = list(providers)
        self.retry = retry if retry is not None else RetryPolicy()
        self.cooldowns = cooldowns
        self.sleep = sleep

    def for_turn(self, *, adapt: Adapt | None = None) -> ChainTurn:
        """A view for one conversation turn, starting on the first provider not cooling down.

        ``adapt(request, provider)`` re-fits a request to the provider taking over after a
        switch (e.g. prompt-cache markers one upstream accepts and another refuses).
        """
        ready = [p for p in self.providers if not self.cooldowns.is_cooling(p.name)]
        cooling = [p for p in self.providers if p not in ready]
        # When every provider is cooling down, trying them beats failing without a call.
        return ChainTurn(self, ready + cooling, adapt=adapt)

    @property
    def name(self) -> str:
        return self.providers[0].name

    @property
    def api_mode(self) -> ApiMode:
        return self.providers[0].api_mode

    @property
    def model(self) -> str:
        return self.providers[0].model

    @property
    def context_window(self) -> int:
        return self.providers[0].context_window

    def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        return self.for_turn().stream(request)

    async def refresh_credentials(self) -> bool:
        results = [await p.refresh_credentials() for p in self.providers]
        return any(results)

    async def aclose(self) -> None:
        for provider in self.providers:
            await provider.aclose()


class ChainTurn:
    """One turn's use of a chain; a Provider whose identity is the provider now in use."""

    def __init__(
        self, chain: FallbackChain, order: list[Provider], *, adapt: Adapt | None = None
    ) -> None:
        self._chain = chain
        self._order = order
        self._index = 0
        self._adapt = adapt

    @property
    def current(self) -> Provider:
        return self._order[self._index]

    @property
    def name(self) -> str:
        return self.current.name

    @property
    def api_mode(self) -> ApiMode:
        return self.current.api_mode

    @property
    def model(self) -> str:
        return self.current.model

    @property
    def context_window(self) -> int:
        return self.current.context_window

    async def refresh_credentials(self) -> bool:
        return await self.current.refresh_credentials()

    async def aclose(self) -> None:
        return None  # the chain owns the providers

    async def stream(self, request: ModelRequest) -> AsyncIterator[ProviderEvent]:
        while True:
            provider = self.current
            failure: ProviderError | None = None
            async for event in self._attempts(provider, request):
                if isinstance(event, ProviderError):
                    failure = event
                else:
                    yield event
            if failure is None:
                return
            if failure.kind is ErrorKind.RATE_LIMIT:
                self._chain.cooldowns.cool(provider.name, failure.retry_after)
            if failure.kind not in FALLBACK_KINDS:
                raise failure
            if self._index + 1 >= len(self._order):
                raise self._exhausted(failure)
            self._index += 1
            if self._adapt is not None:
                request = self._adapt(request, self.current)
            yield ProviderSwitched(
                from_provider=provider.name,
                to_provider=self.current.name,
                reason=failure.kind.value,
            )

    async def _attempts(
        self, provider: Provider, request: ModelRequest
    ) -> AsyncIterator[ProviderEvent | ProviderError]:
        """Call ``provider`` until it answers, yielding its events; end with the last failure
        (as an item, not raised) when it gives up."""
        policy = self._chain.retry
        can_fail_over = self._index + 1 < len(self._order)
        attempt = 0
        refreshed = False
        waited_as_asked = 0.0
        """Seconds this call already waited on this provider's Retry-Afters."""
        while True:
            attempt += 1
            streamed = False
            try:
                events = provider.stream(request)
                deadline = policy.first_byte_timeout if request.stream else None
                first = await _first_event(provider, events, deadline)
                if first is not None:
                    # It answers: whatever it said before, it is not cooling down any more.
                    self._chain.cooldowns.answered(provider.name)
                    streamed = isinstance(first, _OUTPUT)
                    yield first
                    async for event in events:
                        streamed = streamed or isinstance(event, _OUTPUT)
                        yield event
                return
            except ProviderError as error:
                if streamed:
                    raise
                if error.kind in (ErrorKind.AUTH, ErrorKind.FORBIDDEN) and not refreshed:
                    refreshed = True
                    if await provider.refresh_credentials():
                        attempt -= 1  # a call with a new key is not a retry of the old one
                        continue
                delay = (
                    policy.next_wait(
                        attempt, error, can_fail_over=can_fail_over, waited=waited_as_asked
                    )
                    if error.transient
                    else None
                )
                if delay is None:
                    yield error
                    return
                if error.retry_after is not None:
                    waited_as_asked += delay
                yield ProviderRetry(
                    provider=provider.name, attempt=attempt, delay_s=delay, reason=error.kind.value
                )
                await self._chain.sleep(delay)

    def _exhausted(self, failure: ProviderError) -> ProviderError:
        if len(self._order) == 1:
            return failure
        return ProviderError(
            f"every provider failed ({', '.join(p.name for p in self._order)}); "
            f"last: {failure.message}",
            kind=failure.kind,
            provider=failure.provider,
            status_code=failure.status_code,
            retry_after=failure.retry_after,
        )


async def _first_event(
    provider: Provider, events: AsyncIterator[ProviderEvent], seconds: float | None
) -> ProviderEvent | None:
    """The first event of a call (None if it has none), failing as a timeout when it takes
    longer than ``seconds``: a streamed call that says nothing for that long is treated as a
    provider that does not answer. (A call fetched in one piece passes None: it may take as
    long as the whole reply takes.)"""
    if seconds is None:
        return await anext(events, None)
    try:
        async with asyncio.timeout(seconds):
            return await anext(events, None)
    except TimeoutError:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
        raise ProviderError(
            f"{provider.name}: no answer within {seconds:g} s",
            kind=ErrorKind.TIMEOUT,
            provider=provider.name,
        ) from None
