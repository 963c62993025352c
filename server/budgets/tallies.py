"""What this replica's runs have spent of each budget since a moment: how runs of one key that
run at once here stop when their *combined* spend reaches what was left.

The usage ledger gains each model call as a run counts it (``server/usage/ledger.py``), so
admission, which reads the ledger, sees every counted call of every replica. But a run reads
the ledger only when it is admitted; between its model calls it looks here. Each replica keeps,
per budget (a key's or an end user's, per measure and period), a :class:`Tally`: a monotonic
sum of what the runs held to it here have spent, fed by each run's ``on_call`` as its calls are
counted. A run's check before each model call measures what was spent since it was admitted as
the difference. A run stays in the tallies of the day and month it was admitted in.

All of it runs on the event loop thread, with no await between reading a tally and changing
it, so it needs no lock. Runs on other replicas are seen only at admission (docs/budgets.md).
"""

from __future__ import annotations

from typing import Literal
from weakref import WeakValueDictionary

Measure = Literal["tokens_per_day", "cost_per_month_usd"]

TallyKey = tuple[str, str | None, Measure, str]
"""(key's principal, end user or None for the key's own budget, measure, first day of the
period: ``YYYY-MM-DD``)."""


class Tally:
    """What this replica's runs spent of one budget in one period (tokens, or USD)."""

    __slots__ = ("__weakref__", "spent")

    def __init__(self) -> None:
        self.spent = 0.0
        """Everything ever added: it only grows, so a run measures what was spent since it
        was admitted as the difference."""


class Tallies:
    """The tallies of this replica's runs held to a budget."""

    __slots__ = ("_tallies",)

    def __init__(self) -> None:
        # A tally lives as long as a run held to it (through its spend limit): once the last
        # has ended, it goes, so a replica keeps none per idle end user.
        self._tallies: WeakValueDictionary[TallyKey, Tally] = WeakValueDictionary()

    def tally(self, owner: str, end_user: str | None, measure: Measure, period: str) -> Tally:
        """The tally of ``owner``'s budget (``end_user``'s, when named) for ``measure`` in the
        period that starts on ``period``."""
        key = (owner, end_user, measure, period)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = Tally()
        return tally
