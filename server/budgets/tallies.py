"""What this replica's runs have spent of each budget since a moment: how runs of one key that
run at once here stop when their *combined* spend reaches what was left.

The usage ledger gains each model call as a run counts it (``server/usage/ledger.py``), so
admission, which reads the ledger, sees every counted call of every replica. But a run reads
the ledger only when it is admitted; between its model calls it looks here. Each replica keeps,
per budget (a key's or an end user's, per measure and period), a :class:`Tally`: a monotonic
sum of what the runs held to it here have spent, fed by each run's ``on_call`` as its calls are
counted. A run's check before each model call measures what was spent since it was admitted as
the difference. A run stays in the tallies of the day and month it was admitted in.

With replicas, what runs on *other* replicas spend is learnt from the ledger too: every read of
a budget's total (at admission, and every few seconds while runs here are held to it:
``refresh.py``) adds what the total grew by since the previous read, less what this replica's
runs added meanwhile, to the tally's ``others``, and a run's check counts what that grew by since
it was admitted as well.

All of it runs on the event loop thread, with no await between reading a tally and changing
it, so it needs no lock.
"""

from __future__ import annotations

from typing import Literal
from weakref import WeakValueDictionary

Measure = Literal["tokens_per_day", "cost_per_month_usd"]

TallyKey = tuple[str, str | None, Measure, str]
"""(key's principal, end user or None for the key's own budget, measure, first day of the
period: ``YYYY-MM-DD``)."""


class Tally:
    """What this replica's runs spent of one budget in one period (tokens, or USD), and what
    the runs on other replicas spent of it, as far as this replica has read the ledger."""

    __slots__ = ("__weakref__", "_ledger", "_own", "counted", "key", "others", "refreshed", "spent")

    def __init__(self, key: TallyKey) -> None:
        self.key = key
        self.spent = 0.0
        """Everything ever added: it only grows, so a run measures what was spent since it
        was admitted as the difference."""
        self.counted = 0.0
        """What this replica's runs added to the ledger (their counted calls): as ``spent``,
        less a running sub-agent's calls, which its checks add to ``spent`` and which reach
        the ledger only when it ends."""
        self.others = 0.0
        """What runs elsewhere added to the ledger, as far as reads of it told (see
        :meth:`read`): it only grows too."""
        self.refreshed = False
        """Whether the ledger is re-read for it while it lives (``refresh.py``)."""
        self._ledger: float | None = None
        """The ledger's total at the newest read (None: never read)."""
        self._own = 0.0
        """``counted`` before that read began: at least this much of it is this replica's."""

    def read(self, total: float, counted_before: float) -> None:
        """The ledger's ``total`` for this budget, read once ``counted`` was ``counted_before``.

        The read flushed this replica's calls counted by then, and can hold none counted after
        it (``counted`` now), so what the total grew by since the previous read, less what
        ``counted`` grew by from before that read to now, is at most what other replicas
        spent: calls in flight, and this replica's being written, make it an underestimate,
        never a double count. A read that raced a newer one and saw less is left out."""
        last = self._ledger
        if last is not None:
            if total < last:
                return
            self.others += max(0.0, (total - last) - (self.counted - self._own))
        self._ledger = total
        self._own = max(self._own, counted_before)


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
            tally = self._tallies[key] = Tally(key)
        return tally
