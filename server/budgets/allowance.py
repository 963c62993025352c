"""What is left of a budget, and how the runs held to it are stopped between model calls.

Budgets run over UTC calendar periods: tokens per day (from 00:00 UTC) and cost per month
(from the 1st, 00:00 UTC). A run is admitted with what was left of each budget that holds it
when it started (:class:`Allowance`: the limit less the ledger's total, which holds every
call counted so far on every replica). :class:`HeldToBudgets` adds the run's calls to the
budgets' tallies here as they are counted (``tallies.py``), and ends it before its next model
call once what every run held to one of them here has spent since it was admitted, with what
runs on other replicas have been read to spend since (``refresh.py``), reaches what was left:
runs of one key that run at once share it. The call that crosses the line is paid for, so a
budget is overrun by at most one model call per run on one replica (docs/budgets.md says what
other replicas add).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Sequence
from dataclasses import dataclass

from hermes_core.events import CallRecord
from server.budgets.tallies import Measure, Tally


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
    """Tokens, or USD: the limit less the ledger's total."""
    resets: int
    """When the budget's period ends (seconds since the epoch)."""
    tally: Tally
    """What this replica's runs spend of the budget (the run's calls go in it)."""
    tallied: float
    """``tally.spent`` before the ledger was read for ``left``: what was spent since is the
    difference (a call counted during the read may be in both: counted twice, never missed)."""
    others: float
    """``tally.others`` once the ledger was read for ``left``: what other replicas were read
    to spend since is the difference."""

    def describe(self) -> str:
        """``the daily token budget of this API key (1000 tokens per UTC day)``."""
        if self.measure == "tokens_per_day":
            return f"the daily token budget of {self.whose} ({int(self.limit)} tokens per UTC day)"
        return (
            f"the monthly cost budget of {self.whose} ({self.limit:.2f} USD per UTC calendar month)"
        )


class HeldToBudgets:
    """A run's spend limit (``AgentRequest.spend_limit``): what was left of its key's and end
    user's budgets when it started, shared with the runs held to them on this replica.

    :meth:`count` is the run's ``AgentRequest.on_call`` (admission sets it): each call the run
    pays for enters the tallies as it is counted. A sub-agent's calls are counted into the run
    only when the sub-agent ends; while it runs, its checks hand them over (the calls after the
    ones counted), and they enter the tallies then, known by identity, so that they are added
    once."""

    __slots__ = ("_early", "allowances", "cost_usd", "counted", "tokens")

    def __init__(self, allowances: Sequence[Allowance]) -> None:
        self.allowances = tuple(allowances)
        self.counted = 0
        """Calls the run has counted (``count``): the first ones of every check's ``calls``."""
        self.tokens = 0
        self.cost_usd = 0.0
        """What the run added to the tallies."""
        self._early: dict[int, CallRecord] = {}
        """Sub-agents' calls added at a check before they were counted, by identity (holding
        them, so that an identity is not reused meanwhile)."""

    def count(self, call: CallRecord) -> None:
        """A call the run counted (and the ledger gained): into the tallies, unless a check put
        it there already."""
        self.counted += 1
        tokens = call.usage.input_tokens + call.usage.output_tokens
        for allowance in self.allowances:
            allowance.tally.counted += (
                tokens if allowance.measure == "tokens_per_day" else call.cost_usd
            )
        if self._early and self._early.pop(id(call), None) is not None:
            return
        self._add(tokens, call.cost_usd)

    def exceeded(self, calls: Sequence[CallRecord]) -> str | None:
        if len(calls) > self.counted:  # a sub-agent's, still running
            self._add_early(calls[self.counted :])
        for allowance in self.allowances:
            tally = allowance.tally
            since = (tally.spent - allowance.tallied) + (tally.others - allowance.others)
            if since >= allowance.left:
                own = self.tokens if allowance.measure == "tokens_per_day" else self.cost_usd
                who = "This run" if own >= allowance.left else "This run and others beside it"
                return (
                    f"{who} used up what was left of {allowance.describe()}: "
                    f"it resets at {utc(allowance.resets)}."
                )
        return None

    def _add_early(self, calls: Sequence[CallRecord]) -> None:
        early = self._early
        tokens = 0
        cost = 0.0
        for call in calls:
            if id(call) not in early:
                early[id(call)] = call
                tokens += call.usage.input_tokens + call.usage.output_tokens
                cost += call.cost_usd
        if tokens or cost:
            self._add(tokens, cost)

    def _add(self, tokens: int, cost: float) -> None:
        self.tokens += tokens
        self.cost_usd += cost
        for allowance in self.allowances:
            allowance.tally.spent += tokens if allowance.measure == "tokens_per_day" else cost
