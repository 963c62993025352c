"""When and how long to wait before calling a failing upstream again."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from hermes_core.errors import ProviderError


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Jittered exponential backoff for transient failures, honouring Retry-After."""

    max_attempts: int = 3
    """Calls per provider per model call, the first one included."""
    base_delay: float = 1.0
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    """An upstream's Retry-After longer than this is cut to it."""
    jitter: bool = True

    def delay(self, attempt: int, error: ProviderError) -> float:
        """Seconds to wait after failed ``attempt`` (1-based)."""
        if error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after)
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        # "Equal jitter": spread retries of many runs apart without ever waiting ~0.
        return float(backoff * random.uniform(0.5, 1.0)) if self.jitter else float(backoff)


DEFAULT_COOLDOWN = 60.0


class Cooldowns:
    """Providers that are rate-limited right now; shared by every run of the process."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def cool(self, provider: str, seconds: float | None) -> None:
        with self._lock:
            self._until[provider] = time.monotonic() + (seconds or DEFAULT_COOLDOWN)

    def is_cooling(self, provider: str) -> bool:
        with self._lock:
            until = self._until.get(provider)
            if until is None:
                return False
            if until <= time.monotonic():
                del self._until[provider]
                return False
            return True

    def clear(self) -> None:
        with self._lock:
            self._until.clear()


PROCESS_COOLDOWNS = Cooldowns()
