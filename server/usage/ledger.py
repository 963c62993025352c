"""The run observer that keeps the usage ledger.

When a run ends, its model calls (``RunFinished.calls``: every call it paid for, a
compression's summariser and its sub-agents' included) are summed per provider and model and
added to the ledger rows of its key, end user, profile and the UTC day it ended on. The adds
are queued on the store's write queue, so the run manager's ``settle`` makes them durable
before anyone hears the run ended: a budget checked for the next run sees them. In the same
step, without an await between, the run's spend leaves the budgets' in-flight tallies
(``server/budgets/in_flight.py``), where it was counted while the run went on.

It runs on every run: the ending is the only event it reads (one type check for the others),
and the day's name is worked out once a day, not per run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hermes_core.events import AgentEvent, CallRecord, RunFinished
from hermes_core.persistence.usage import UsageEntry, UsageStore
from hermes_core.usage import Usage
from server.budgets.in_flight import InFlight
from server.runs.manager import RunInfo
from server.runs.observers import observes

_SECONDS_PER_DAY = 86_400


class UsageLedger:
    def __init__(
        self,
        store: UsageStore,
        *,
        in_flight: InFlight | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.in_flight = in_flight if in_flight is not None else InFlight()
        """The budgets' tallies of what runs in flight here spent (``Budgets.in_flight``)."""
        self.clock = clock
        """The time a run ended at, when its ending is observed."""
        self._day_number = -1
        self._day = ""

    @observes(RunFinished)
    def observe(self, run: RunInfo, event: AgentEvent) -> None:
        """The run observer: handed only runs' endings."""
        if type(event) is RunFinished:
            if event.calls:
                self.record(run, event)
            if self.in_flight.runs:  # a run held to a budget has spent something
                self.in_flight.settle(run.id)

    def record(self, run: RunInfo, event: RunFinished) -> None:
        """Add ``run``'s calls to the ledger."""
        day = self.day(self.clock())
        calls = event.calls
        first = calls[0]
        if len(calls) == 1:  # the common run: one answer, nothing to sum
            totals = {(first.provider, first.model): (1, first.usage, first.cost_usd)}
        else:
            totals = _per_model(calls)
        owner = run.owner
        end_user = run.end_user or ""
        profile = run.model
        self.store.add(
            [
                UsageEntry(
                    day=day,
                    owner=owner,
                    end_user=end_user,
                    profile=profile,
                    provider=provider,
                    model=model,
                    calls=count,
                    usage=usage,
                    cost_usd=cost,
                )
                for (provider, model), (count, usage, cost) in totals.items()
            ]
        )

    def day(self, now: float) -> str:
        """``YYYY-MM-DD`` (UTC) of ``now``: formatted once per day."""
        number = int(now // _SECONDS_PER_DAY)
        if number != self._day_number:
            self._day = time.strftime("%Y-%m-%d", time.gmtime(number * _SECONDS_PER_DAY))
            self._day_number = number
        return self._day


def _per_model(calls: Sequence[CallRecord]) -> dict[tuple[str, str], tuple[int, Usage, float]]:
    """Calls, usage and cost per (provider, model)."""
    totals: dict[tuple[str, str], tuple[int, Usage, float]] = {}
    for call in calls:
        key = (call.provider, call.model)
        seen = totals.get(key)
        if seen is None:
            totals[key] = (1, call.usage, call.cost_usd)
        else:
            totals[key] = (seen[0] + 1, seen[1] + call.usage, seen[2] + call.cost_usd)
    return totals
