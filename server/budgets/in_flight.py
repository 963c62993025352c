"""What the runs in flight on this replica have spent of each budget, before the ledger has it.

The usage ledger gains a run's spend only when the run ends, so runs of one key that run at
the same time would each see the whole of what was left. Each replica therefore keeps, per
budget (a key's or an end user's, per measure and period), a :class:`Tally` of what its runs
in flight spent: a run held to that budget adds its calls when its limit is checked, before
each model call after its first (the engine hands its calls over there, and nowhere else), and
takes them out again when the ledger observer adds them to the ledger
(``server/usage/ledger.py``). Admission counts the ledger and the tally; a run's check counts
everything tallied since it was admitted. A run stays in the tallies of the day and month it
was admitted in, even when it ends (and is recorded) after midnight.

All of it runs on the event loop thread, with no await between reading a tally and changing
it, so it needs no lock. Runs on other replicas are not seen until they end (docs/budgets.md).
"""

from __future__ import annotations

from typing import Literal, Protocol
from weakref import WeakValueDictionary

Measure = Literal["tokens_per_day", "cost_per_month_usd"]

TallyKey = tuple[str, str | None, Measure, str]
"""(key's principal, end user or None for the key's own budget, measure, first day of the
period: ``YYYY-MM-DD``)."""


class Tally:
    """What this replica's runs in flight spent of one budget in one period (tokens, or USD)."""

    __slots__ = ("__weakref__", "in_flight", "settlements", "spent")

    def __init__(self) -> None:
        self.spent = 0.0
        """Everything ever added: it only grows, so a run measures what was spent since it
        was admitted as the difference (runs that end meanwhile do not take it back)."""
        self.in_flight = 0.0
        """What runs still in flight added: not in the ledger yet."""
        self.settlements = 0
        """How many runs took their spend out (it moved to the ledger): admission reads the
        ledger again when one did while it read."""

    def add(self, amount: float) -> None:
        self.spent += amount
        self.in_flight += amount

    def settle(self, amount: float) -> None:
        # Never below zero: float sums of costs need not cancel exactly.
        self.in_flight = max(0.0, self.in_flight - amount)
        self.settlements += 1


class Settles(Protocol):
    """A run's share of the tallies (``allowance.HeldToBudgets``)."""

    def settle(self) -> None:
        """Take what the run added out of the tallies."""
        ...


class InFlight:
    """The tallies of this replica, and the runs whose spend is in them."""

    __slots__ = ("_tallies", "runs")

    def __init__(self) -> None:
        # A tally lives as long as a run held to it (through its spend limit): once the last
        # has ended and its spend settled, it goes, so a replica keeps none per idle end user.
        self._tallies: WeakValueDictionary[TallyKey, Tally] = WeakValueDictionary()
        self.runs: dict[str, Settles] = {}
        """Run id → the spend limit of a run that added something, until it is settled."""

    def tally(self, owner: str, end_user: str | None, measure: Measure, period: str) -> Tally:
        """The tally of ``owner``'s budget (``end_user``'s, when named) for ``measure`` in the
        period that starts on ``period``."""
        key = (owner, end_user, measure, period)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = Tally()
        return tally

    def settle(self, run_id: str) -> None:
        """The ledger gained ``run_id``'s spend: take it out of the tallies."""
        held = self.runs.pop(run_id, None)
        if held is not None:
            held.settle()
