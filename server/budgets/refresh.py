"""Learning, while runs go on, what the runs on other replicas spend of their budgets.

A run reads the ledger when it is admitted; after that its checks look at its budget's tally
(``tallies.py``), which this replica's runs feed. Alone, a server needs nothing more. With
replicas, runs of one key elsewhere spend from the same budget, and a run here would not know:
runs of one key that started together on N replicas could spend N times what was left. So
while a tally lives on a replica with others (some run here is held to it), one task re-reads
its budget's total from the ledger every ``every`` seconds and hands it to :meth:`Tally.read`,
which adds the other replicas' part to ``tally.others``; the runs' checks, before each model
call, count that as well (``allowance.py``). The check stays a sum of numbers in memory: the
database is read here, off the runs' path, once per budget rather than once per run.

The interval (``limits.budget_refresh_seconds``) is reloadable: a change wakes the refreshers
waiting out the old one, which then wait the new one.
"""

from __future__ import annotations

import asyncio
import logging
import weakref

from hermes_core.persistence.usage import UsageStore
from server.budgets.tallies import Tally, TallyKey

log = logging.getLogger("hermes.budgets")


async def ledger_total(store: UsageStore, key: TallyKey) -> float:
    """What the ledger holds of the budget of ``key``'s tally: tokens, or USD, since the first
    day of its period (every replica's calls, this one's flushed first)."""
    owner, end_user, measure, period = key
    spent = await store.spent(owner, end_user, since_day=period)
    return spent.tokens if measure == "tokens_per_day" else spent.cost_usd


class Interval:
    """How long the refreshers wait between reads of the ledger; changed by a reload."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._changed = asyncio.Event()

    def change(self, seconds: float) -> None:
        """Wait ``seconds`` from now on: refreshers waiting out the old interval start again
        with the new one."""
        if seconds == self.seconds:
            return
        self.seconds = seconds
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self) -> None:
        """One interval, begun again (the new one) whenever it is changed meanwhile."""
        while True:
            changed = self._changed
            try:
                async with asyncio.timeout(self.seconds):
                    await changed.wait()
            except TimeoutError:
                return


async def refresh(tally: weakref.ref[Tally], store: UsageStore, every: Interval) -> None:
    """Read the ledger for ``tally``'s budget once per interval ``every`` until the tally is gone
    (its last run ended: it is held weakly, so that this task keeps none alive).

    A failed read (the database down) is logged once until a read succeeds again; the runs go
    on meanwhile with what they know, as a run admitted then would."""
    failing = False
    while True:
        await every.wait()
        live = tally()
        if live is None:
            return
        key, counted = live.key, live.counted
        del live  # held only while no await is pending
        try:
            total = await ledger_total(store, key)
        except Exception:
            if not failing:
                log.warning(
                    "cannot read the usage ledger: runs here do not learn what other "
                    "replicas spend of their budgets until it can be read again",
                    exc_info=True,
                )
            failing = True
            continue
        if failing:
            log.warning("the usage ledger can be read again")
            failing = False
        live = tally()
        if live is None:
            return
        live.read(total, counted)
        del live
