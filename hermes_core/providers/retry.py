"""When and how long to wait before calling a failing upstream again."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hermes_core.errors import ErrorKind, ProviderError


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Jittered exponential backoff for transient failures, honouring Retry-After."""

    max_attempts: int = 3
    """Calls per provider per model call, the first one included."""
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    """The longest one provider keeps a model call waiting on its Retry-Afters, all of them
    together: on the chain's last (or only) provider a longer one is waited for only what is
    left of this, then the call gives up; with another provider to go to, the chain fails
    over at once instead of waiting."""
    first_byte_timeout: float | None = 120.0
    """Seconds a streamed call may take to produce its first event (connect, queueing, a
    model's silent thinking); then it is a timeout, and with another provider to go to, the
    chain fails over at once rather than retry a provider that does not answer. None: only
    the provider's own timeout applies."""
    jitter: bool = True

    def next_wait(
        self, attempt: int, error: ProviderError, *, can_fail_over: bool, waited: float
    ) -> float | None:
        """Seconds to wait before calling the same provider again after failed ``attempt``
        (1-based, transient ``error``), or None to give up on it and move on.

        ``waited`` is what this provider's Retry-Afters already cost the model call: the cap
        bounds their sum, not each one (else every attempt could wait the whole cap)."""
        if attempt >= self.max_attempts:
            return None
        if can_fail_over and error.kind is ErrorKind.TIMEOUT:
            return None  # a provider that does not answer costs a timeout per attempt
        if error.retry_after is None:
            return self._backoff(attempt)
        left = max(0.0, self.max_retry_after - waited)
        if error.retry_after <= left:
            return error.retry_after
        if can_fail_over or left == 0:
            return None
        return left  # the last provider: perhaps it is free again sooner than it said

    def _backoff(self, attempt: int) -> float:
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        # "Equal jitter": spread retries of many runs apart without ever waiting ~0.
        return float(backoff * random.uniform(0.5, 1.0)) if self.jitter else float(backoff)


DEFAULT_COOLDOWN = 60.0
MAX_COOLDOWN = 600.0
"""A rate limit keeps a provider out of first place this long at most, whatever it asked."""
PROBE_SECONDS = 30.0
"""While a provider cools down, one turn every this many seconds tries it first anyway (the
half-open probe): a provider that answers again is back at once, not when its Retry-After
(up to an hour) runs out."""


def rate_limited_for(failure: ProviderError) -> float | None:
    """Seconds a failure refused for its rate asks to wait before asking again (what the
    upstream said, else the cooldown it causes), or None when it was no rate limit."""
    if failure.kind is not ErrorKind.RATE_LIMIT:
        return None
    if failure.retry_after is None:
        return DEFAULT_COOLDOWN
    return min(failure.retry_after, MAX_COOLDOWN)  # 0 too: "at once" is what it said


CooldownListener = Callable[[str, float | None], None]
"""Told ``(provider, seconds)`` when this process puts a provider on cooldown, and
``(provider, None)`` when one answers again (replicas share their cooldowns this way)."""


class Cooldowns:
    """Providers that are rate-limited right now; shared by every run of the process."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._next_probe: dict[str, float] = {}
        self._lock = threading.Lock()
        self.listeners: list[CooldownListener] = []

    def cool(self, provider: str, seconds: float | None) -> None:
        seconds = min(seconds or DEFAULT_COOLDOWN, MAX_COOLDOWN)
        self.apply(provider, seconds)
        for listener in self.listeners:
            listener(provider, seconds)

    def apply(self, provider: str, seconds: float | None) -> None:
        """Set ``provider``'s cooldown as another replica found it (``None``: it answered),
        without telling the listeners (they told us)."""
        if seconds is None:
            self._forget(provider)
            return
        now = time.monotonic()
        with self._lock:
            self._until[provider] = now + min(seconds, MAX_COOLDOWN)
            self._next_probe[provider] = now + PROBE_SECONDS

    def cooling(self) -> list[str]:
        """The providers cooling down now (for /ready)."""
        now = time.monotonic()
        with self._lock:
            return sorted(name for name, until in self._until.items() if until > now)

    def is_cooling(self, provider: str) -> bool:
        """Whether to keep ``provider`` out of first place now. False for the one caller that
        gets to probe it (every ``PROBE_SECONDS``)."""
        if provider not in self._until:  # the common case, without the lock
            return False
        now = time.monotonic()
        with self._lock:
            until = self._until.get(provider)
            if until is None:
                return False
            if until <= now:
                del self._until[provider]
                self._next_probe.pop(provider, None)
                return False
            if self._next_probe.get(provider, until) <= now:
                self._next_probe[provider] = now + PROBE_SECONDS
                return False
            return True

    def answered(self, provider: str) -> None:
        """``provider`` answered a call: it is not cooling down any more."""
        if provider not in self._until:
            return
        self._forget(provider)
        for listener in self.listeners:
            listener(provider, None)

    def _forget(self, provider: str) -> None:
        with self._lock:
            self._until.pop(provider, None)
            self._next_probe.pop(provider, None)

    def clear(self) -> None:
        with self._lock:
            self._until.clear()
            self._next_probe.clear()


PROCESS_COOLDOWNS = Cooldowns()
