"""What a model call costs: list prices per model, and the cost of a call's usage.

Prices are US dollars per million tokens. A model is found by its name or, failing that, by
the longest price-table entry its name starts with, so ``claude-sonnet-4-20250514`` is priced
as ``claude-sonnet-4``. A model found nowhere costs nothing (its calls are still counted in
tokens). The defaults are the vendors' published list prices for their common models as of
2026-11 (standard tier, 5-minute cache writes); a deployment with other prices, or other
models, names them in the configuration's ``prices`` table, which overrides these entry by
entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hermes_core.usage import Usage

PER_TOKEN = 1e-6
"""Prices are per million tokens."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """One model's prices, USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None
    """None: cache reads cost ``input``."""
    cache_write: float | None = None
    """None: cache writes cost ``input``."""

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs at these prices. ``usage.input_tokens`` holds the whole prompt
        (cache reads and writes included; see ``hermes_core/usage.py``)."""
        cached = usage.cache_read_tokens
        written = usage.cache_write_tokens
        fresh = max(0, usage.input_tokens - cached - written)
        read_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        return PER_TOKEN * (
            fresh * self.input
            + cached * read_price
            + written * write_price
            + usage.output_tokens * self.output
        )


def _openai(input: float, cached: float, output: float) -> Price:
    return Price(input=input, output=output, cached_input=cached)


def _anthropic(input: float, output: float) -> Price:
    # Anthropic: cache reads are a tenth of input, 5-minute cache writes 1.25 times it.
    return Price(input=input, output=output, cached_input=input * 0.1, cache_write=input * 1.25)


DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-5": _openai(1.25, 0.125, 10.0),
    "gpt-5-mini": _openai(0.25, 0.025, 2.0),
    "gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "gpt-4.1": _openai(2.0, 0.50, 8.0),
    "gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "gpt-4o": _openai(2.50, 1.25, 10.0),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "o3": _openai(2.0, 0.50, 8.0),
    "o3-pro": Price(input=20.0, output=80.0),
    "o3-mini": _openai(1.10, 0.55, 4.40),
    "o4-mini": _openai(1.10, 0.275, 4.40),
    "claude-opus-4-5": _anthropic(5.0, 25.0),
    "claude-opus-4": _anthropic(15.0, 75.0),
    "claude-sonnet-4": _anthropic(3.0, 15.0),
    "claude-3-7-sonnet": _anthropic(3.0, 15.0),
    "claude-haiku-4-5": _anthropic(1.0, 5.0),
    "claude-3-5-haiku": _anthropic(0.80, 4.0),
}
"""List prices of common models (USD per million tokens, 2026-11); ``prices`` in the
configuration overrides or adds to them. docs/budgets.md lists them."""


class PriceTable:
    """Model name → price, by exact name or longest matching prefix; remembers each lookup
    (a run prices every call, and the models in use are few)."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(DEFAULT_PRICES if prices is None else prices)
        # Longest first: the first prefix that matches is the most specific one.
        self._prefixes = sorted(self._prices, key=len, reverse=True)
        self._found: dict[str, Price | None] = {}

    @classmethod
    def with_defaults(cls, overrides: Mapping[str, Price]) -> PriceTable:
        """The built-in prices with ``overrides`` (the configuration's) laid over them."""
        return cls({**DEFAULT_PRICES, **overrides})

    def price(self, model: str) -> Price | None:
        """``model``'s price, or None when the table has none for it."""
        try:
            return self._found[model]
        except KeyError:
            pass
        found = self._lookup(model)
        if found is None and "/" in model:  # a router's name for it: "openai/gpt-4o"
            found = self._lookup(model.rsplit("/", 1)[1])
        if len(self._found) < 1024:  # models come from upstreams' answers: keep it bounded
            self._found[model] = found
        return found

    def _lookup(self, model: str) -> Price | None:
        found = self._prices.get(model)
        if found is None:
            found = next((self._prices[p] for p in self._prefixes if model.startswith(p)), None)
        return found

    def cost(self, model: str, usage: Usage) -> float:
        """What ``usage`` of ``model`` costs; 0 for a model the table does not price."""
        price = self.price(model)
        return 0.0 if price is None else price.cost(usage)
