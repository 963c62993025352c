"""``GET /v1/usage``: the usage ledger's sums (docs/usage.md)."""

from __future__ import annotations

from typing import Literal

from server.protocol.schemas.common import Omittable, Shape

UsageGroup = Literal["day", "end_user", "model", "provider", "profile", "key"]


class UsageSums(Shape):
    """Model calls, tokens and cost summed over ledger rows."""

    calls: int
    """Model calls that answered, and calls cut off mid-way (their tokens estimated)."""
    input_tokens: int
    """The whole prompts, cache reads and writes included."""
    cache_read_tokens: int
    """Part of ``input_tokens`` read from the providers' prompt caches."""
    cache_write_tokens: int
    """Part of ``input_tokens`` written to the providers' prompt caches."""
    output_tokens: int
    """Generated tokens, reasoning included."""
    reasoning_tokens: int
    """Part of ``output_tokens`` spent on reasoning."""
    total_tokens: int
    """``input_tokens + output_tokens``."""
    cost_usd: float
    """US dollars at the configured prices when the runs ended (0 for unpriced models)."""


class UsageLine(UsageSums):
    """The sums of one group: the fields grouped by (``group_by``) name it."""

    day: Omittable[str] = None
    """``YYYY-MM-DD``, UTC: the day the runs ended."""
    key: Omittable[str] = None
    """The API key's principal (its ``name`` in the configuration)."""
    end_user: Omittable[str | None] = None
    """The end user the runs were for; null for the key's own runs (no end user named)."""
    profile: Omittable[str] = None
    """The profile (the ``model`` a client names) the runs ran."""
    provider: Omittable[str] = None
    """The configured provider that served the calls."""
    model: Omittable[str] = None
    """The provider's model that served the calls."""


class UsageReport(Shape):
    """What the ledger holds for the filters, a line per group and the totals."""

    object: Literal["list"]
    data: list[UsageLine]
    """One line per distinct value of the ``group_by`` fields, sorted by them."""
    totals: UsageSums
    """Over every line (also those past ``has_more``)."""
    group_by: list[UsageGroup]
    start_day: str
    """The first day summed (``from``), UTC."""
    end_day: str
    """The last day summed (``to``), UTC, inclusive."""
    has_more: bool
    """More lines matched than an answer holds: group by less, or narrow the days."""
