"""The usage ledger: every model call a run pays for, added to its key's, end user's,
profile's and provider model's row of the UTC day, as the run counts it.

A run the server starts (``server/serving/common.py``: ``start_run``) carries the ledger's
:meth:`UsageLedger.counter` as its ``AgentRequest.on_call``: each call it pays for (its own, a
compression's summariser's, and a sub-agent's once the sub-agent ends) is queued on the store's
write queue the moment the run counts it, one row addition per call, the day the call's. So a
replica that dies mid-run loses at most its calls in flight and the writer's last batch, and a
budget checked on any replica sees a running run's calls once the write is committed.

The observer of runs' endings adds what no counter saw: all the calls of a run started
without one (in-process runs, anything not started through ``start_run``), summed per provider
and model, on the day the run ended. It keeps a per-run count of the calls its counter added,
so no call is added twice. The run manager's ``settle`` makes every addition durable before
anyone hears the run ended: a budget checked for the next run sees them.

It runs on every run: the ending is the only event it reads, and the day's name is worked out
once a day, not per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from hermes_core.agent.config import CallHook
from hermes_core.events import AgentEvent, CallRecord, RunFinished
from hermes_core.persistence.usage import UsageEntry, UsageStore
from hermes_core.usage import Usage
from server.runs.manager import RunInfo
from server.runs.observers import observes

_SECONDS_PER_DAY = 86_400


class UsageLedger:
    def __init__(self, store: UsageStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        """The time a call was counted, or a run ended, when the ledger hears of it."""
        self._day_number = -1
        self._day = ""
        self._counted: dict[str, int] = {}
        """Run id → calls its counter added, until the run's ending is observed (only runs
        that have made a call are here)."""

    def counter(
        self,
        run_id: str,
        owner: str,
        end_user: str | None,
        profile: str,
    ) -> CallHook:
        """The ``AgentRequest.on_call`` of run ``run_id`` (of ``owner``'s key, for
        ``end_user``, of ``profile``): adds each call to the ledger as it is counted."""
        store = self.store
        counted = self._counted
        user = end_user or ""

        def count(call: CallRecord) -> None:
            store.add(
                (
                    UsageEntry(
                        day=self.day(self.clock()),
                        owner=owner,
                        end_user=user,
                        profile=profile,
                        provider=call.provider,
                        model=call.model,
                        calls=1,
                        usage=call.usage,
                        cost_usd=call.cost_usd,
                    ),
                )
            )
            counted[run_id] = counted.get(run_id, 0) + 1

        return count

    @observes(RunFinished)
    def observe(self, run: RunInfo, event: AgentEvent) -> None:
        """The run observer: handed only runs' endings."""
        if type(event) is RunFinished:
            calls = event.calls
            if self._counted:
                # ``calls`` is in the order they were counted: the counter saw the first ones.
                seen = self._counted.pop(run.id, 0)
                if seen:
                    calls = calls[seen:]
            if calls:
                self.record(run, calls)

    def record_call(self, run: RunInfo, call: CallRecord) -> None:
        """Add one call made for ``run`` after it ended (learning from it): paid for by its
        key, end user and profile, though no run counted it."""
        self.record(run, (call,))

    def record(self, run: RunInfo, calls: Sequence[CallRecord]) -> None:
        """Add ``calls`` of ``run`` to the ledger, on the day it ended."""
        day = self.day(self.clock())
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
