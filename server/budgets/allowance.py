"""What is left of a budget, and how a run is held to it between its model calls.

Budgets run over UTC calendar periods: tokens per day (from 00:00 UTC) and cost per month
(from the 1st, 00:00 UTC). A run is admitted with what was left of each budget that holds it
when it started (:class:`Allowance`); :class:`HeldToBudgets` ends it before its next model call
once its own tokens or cost reach what was left. Runs of one key that start together each get
the whole of what was left: a budget can be overrun by what they spend at once, never by a
run started after it was used up.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hermes_core.events import CallRecord

Measure = Literal["tokens_per_day", "cost_per_month_usd"]


@dataclass(frozen=True, slots=True)
class Periods:
    """The UTC day and month a moment falls in, and when each ends."""

    today: str
    """``YYYY-MM-DD``: the ledger's name for the day."""
    month_start: str
    """``YYYY-MM-01``."""
    day_ends: int
    """The next 00:00 UTC, in seconds since the epoch."""
    month_ends: int
    """00:00 UTC on the 1st of next month, in seconds since the epoch."""

    @classmethod
    def at(cls, now: float) -> Periods:
        moment = time.gmtime(now)
        year, month = moment.tm_year, moment.tm_mon
        next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
        return cls(
            today=time.strftime("%Y-%m-%d", moment),
            month_start=f"{year:04d}-{month:02d}-01",
            day_ends=calendar.timegm((year, month, moment.tm_mday, 0, 0, 0)) + 86_400,
            month_ends=calendar.timegm((next_year, next_month, 1, 0, 0, 0)),
        )

    def ends(self, measure: Measure) -> int:
        return self.day_ends if measure == "tokens_per_day" else self.month_ends


def utc(moment: int) -> str:
    """``2026-12-01T00:00:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


@dataclass(frozen=True, slots=True)
class Allowance:
    """What was left of one budget when a run started."""

    whose: str
    """``this API key`` or ``end user 'alice'``: who the budget is of, for messages."""
    measure: Measure
    limit: float
    left: float
    """Tokens, or USD."""
    resets: int
    """When the budget's period ends (seconds since the epoch)."""

    def used_up(self, tokens: int, cost_usd: float) -> bool:
        spent = tokens if self.measure == "tokens_per_day" else cost_usd
        return spent >= self.left

    def describe(self) -> str:
        """``the daily token budget of this API key (1000 tokens per UTC day)``."""
        if self.measure == "tokens_per_day":
            return f"the daily token budget of {self.whose} ({int(self.limit)} tokens per UTC day)"
        return (
            f"the monthly cost budget of {self.whose} ({self.limit:.2f} USD per UTC calendar month)"
        )


class HeldToBudgets:
    """A run's spend limit (``AgentRequest.spend_limit``): what was left of its key's and end
    user's budgets when it started."""

    __slots__ = ("allowances",)

    def __init__(self, allowances: Sequence[Allowance]) -> None:
        self.allowances = tuple(allowances)

    def exceeded(self, calls: Sequence[CallRecord]) -> str | None:
        tokens = 0
        cost = 0.0
        for call in calls:
            tokens += call.usage.input_tokens + call.usage.output_tokens
            cost += call.cost_usd
        for allowance in self.allowances:
            if allowance.used_up(tokens, cost):
                return (
                    f"This run used up what was left of {allowance.describe()}: "
                    f"it resets at {utc(allowance.resets)}."
                )
        return None
