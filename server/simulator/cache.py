"""A prompt cache that accounts tokens the way Anthropic and OpenAI report them.

A request is a sequence of *segments* (tools, system blocks, message blocks) in prefix order.
Some segments are *breakpoints* (Anthropic ``cache_control``); a breakpoint makes the prefix up
to and including its segment cacheable. A later request whose prefix matches a cached one
(within its TTL) reads those tokens from the cache; the rest of the prefix up to its last
breakpoint is written. Like Anthropic, a lookup at a breakpoint also checks the block
boundaries up to 20 segments before it, so a prefix cached at an earlier breakpoint still hits
when the newest messages changed. Prefixes shorter than ``min_cacheable_tokens`` are never cached,
as on the real APIs. OpenAI-style automatic caching treats every message boundary as a
breakpoint and never reports writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from server.simulator.tokens import digest

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_SEGMENTS = 20


@dataclass(frozen=True, slots=True)
class Segment:
    """One cacheable unit of a prompt."""

    material: str
    """Canonical text that identifies the segment (cache markers excluded)."""
    tokens: int
    breakpoint: bool = False
    ttl: str = "5m"


@dataclass(frozen=True, slots=True)
class CacheResult:
    input_tokens: int
    """The whole prompt."""
    cache_read_tokens: int
    cache_write_tokens: int


class PromptCache:
    """Prefix hashes with expiry; safe to use from the simulator thread and a test thread."""

    def __init__(self, clock: Callable[[], float], *, min_cacheable_tokens: int = 0) -> None:
        self._clock = clock
        self._expires: dict[str, float] = {}
        self._lock = threading.Lock()
        self.min_cacheable_tokens = min_cacheable_tokens

    def clear(self) -> None:
        with self._lock:
            self._expires.clear()

    def account(self, segments: Sequence[Segment], *, report_writes: bool = True) -> CacheResult:
        """Look the request's breakpoint prefixes up, store them, and report the token split."""
        total = sum(seg.tokens for seg in segments)
        boundaries: list[tuple[str, int]] = []  # (key, tokens) of every prefix
        prefixes: list[tuple[int, str, int, str]] = []  # (index, key, tokens, ttl) per breakpoint
        running_key = ""
        running_tokens = 0
        for index, seg in enumerate(segments):
            running_key = digest(running_key, seg.material)
            running_tokens += seg.tokens
            boundaries.append((running_key, running_tokens))
            if seg.breakpoint and running_tokens >= self.min_cacheable_tokens:
                prefixes.append((index, running_key, running_tokens, seg.ttl))
        if not prefixes:
            return CacheResult(total, 0, 0)
        now = self._clock()
        with self._lock:
            read = 0
            for index, _, _, _ in prefixes:
                for key, tokens in boundaries[max(0, index - LOOKBACK_SEGMENTS + 1) : index + 1]:
                    expiry = self._expires.get(key)
                    if tokens >= self.min_cacheable_tokens and expiry and expiry > now:
                        read = max(read, tokens)
            last_tokens = prefixes[-1][2]
            written = max(0, last_tokens - read) if report_writes else 0
            for _, key, _, ttl in prefixes:
                # Reads refresh the TTL, as on Anthropic.
                self._expires[key] = now + TTL_SECONDS.get(ttl, 300.0)
        return CacheResult(total, read, written)
