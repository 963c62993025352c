"""Holding a run to its key's and end user's budgets as it starts.

Every run passes :meth:`Budgets.admit`, so a key with no budget (the usual case) costs one
look at its principal and no query. A key or end user with a budget has what it spent read
from the usage ledger (``hermes_core/persistence/usage.py``), which every replica adds each
model call to as a run counts it (``server/usage/ledger.py``): a run on one replica sees what
the runs on the others spent, those still running included, up to their calls in flight. The
read flushes this replica's write queue first, so it sees every call counted here. With
replicas, the ledger is read again every few seconds while runs here are held to a budget, so
that they learn what the runs elsewhere spend (``refresh.py``). Without a database there is no
ledger, and nothing is enforced.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
import weakref
from collections.abc import Callable

from hermes_core.agent import AgentRequest
from hermes_core.agent.config import chained
from hermes_core.persistence.usage import UsageStore
from server.budgets.allowance import Allowance, HeldToBudgets, Periods, utc
from server.budgets.refresh import Interval, ledger_total, refresh
from server.budgets.tallies import Measure, Tallies, Tally
from server.errors import QuotaExceeded
from server.http.auth import Budget, Principal


class Budgets:
    """The budgets of every key and end user (their definitions ride on the principal, so a
    configuration reload, which replaces the keyring, changes them)."""

    def __init__(
        self, *, clock: Callable[[], float] = time.time, refresh_seconds: float | None = None
    ) -> None:
        self.store: UsageStore | None = None
        """The usage ledger; set when the SQL store opens (``Services.open``)."""
        self.clock = clock
        self.tallies = Tallies()
        """What this replica's runs held to a budget spent, for their checks between calls."""
        self._interval = Interval(refresh_seconds) if refresh_seconds is not None else None
        """With replicas: how often the ledger is read again for a budget runs here are held
        to (``limits.budget_refresh_seconds``). None, a server alone: never (nobody else
        spends)."""
        self.refreshers: set[asyncio.Task[None]] = set()
        """The tasks reading the ledger: one per budget runs here are held to, with replicas."""

    @property
    def refresh_seconds(self) -> float | None:
        """Seconds between reads of the ledger for a budget runs here are held to; None: a
        server alone, which never reads it again."""
        return self._interval.seconds if self._interval is not None else None

    def reload_refresh(self, seconds: float) -> None:
        """A reload's ``limits.budget_refresh_seconds``: applied at once, to the budgets
        already being refreshed too. A server alone stays as it is: it never reads again."""
        if self._interval is not None:
            self._interval.change(seconds)

    async def admit(
        self, principal: Principal, end_user: str | None, request: AgentRequest
    ) -> AgentRequest:
        """``request`` held to what is left of ``principal``'s and ``end_user``'s budgets
        (its ``spend_limit``, fed by its ``on_call``), or a 429 ``quota_exceeded`` when one is
        used up."""
        key = principal.budget
        user = principal.end_user_budget if end_user is not None else None
        if not _limits(key) and not _limits(user):
            return request  # the hot path: no budget, no query
        store = self.store
        if store is None:
            return request
        now = self.clock()
        periods = Periods.at(now)
        refreshing = self.refresh_seconds is not None
        allowances: list[Allowance] = []
        for budget, whose, who in (
            (key, "this API key", None),
            (user, f"end user {end_user!r}", end_user),
        ):
            if budget is None:
                continue
            limits: tuple[tuple[Measure, float | None], ...] = (
                ("tokens_per_day", budget.tokens_per_day),
                ("cost_per_month_usd", budget.cost_per_month_usd),
            )
            for measure, limit in limits:
                if limit is None:
                    continue
                allowance = await _allowance(
                    store,
                    self.tallies,
                    principal.name,
                    who,
                    whose,
                    measure,
                    limit,
                    periods,
                    refreshing=refreshing,
                )
                if allowance.left <= 0:
                    raise _refusal(allowance, now)
                allowances.append(allowance)
        if refreshing:
            for allowance in allowances:
                self._refresh(allowance.tally, store)
        held = HeldToBudgets(allowances)
        return dataclasses.replace(
            request, spend_limit=held, on_call=chained(request.on_call, held.count)
        )

    def _refresh(self, tally: Tally, store: UsageStore) -> None:
        """Have the ledger read for ``tally``'s budget while it lives, unless it is already:
        one task per budget, however many runs are held to it."""
        if tally.refreshed or self._interval is None:
            return
        tally.refreshed = True
        task = asyncio.create_task(refresh(weakref.ref(tally), store, self._interval))
        self.refreshers.add(task)
        task.add_done_callback(self.refreshers.discard)

    async def close(self) -> None:
        """Stop reading the ledger (before the store closes)."""
        for task in self.refreshers:
            task.cancel()
        await asyncio.gather(*self.refreshers, return_exceptions=True)


def _limits(budget: Budget | None) -> bool:
    return budget is not None and (
        budget.tokens_per_day is not None or budget.cost_per_month_usd is not None
    )


async def _allowance(
    store: UsageStore,
    tallies: Tallies,
    owner: str,
    end_user: str | None,
    whose: str,
    measure: Measure,
    limit: float,
    periods: Periods,
    *,
    refreshing: bool,
) -> Allowance:
    since = periods.today if measure == "tokens_per_day" else periods.month_start
    tally = tallies.tally(owner, end_user, measure, since)
    # Before the read: a call counted while it goes on is then in the run's check as well as,
    # perhaps, in the read (the run stops a little sooner), never in neither.
    tallied, counted = tally.spent, tally.counted
    total = await ledger_total(store, tally.key)
    if refreshing:
        # A read like the refresher's: what others spent up to it is in ``left``, so the
        # run counts what ``others`` grows by from here on.
        tally.read(total, counted)
    return Allowance(
        whose=whose,
        measure=measure,
        limit=limit,
        left=limit - total,
        resets=periods.ends(measure),
        tally=tally,
        tallied=tallied,
        others=tally.others,
    )


def _refusal(allowance: Allowance, now: float) -> QuotaExceeded:
    spent = allowance.limit - allowance.left
    period = "today" if allowance.measure == "tokens_per_day" else "this month"
    amount = f"{int(spent)} tokens" if allowance.measure == "tokens_per_day" else f"{spent:.2f} USD"
    description = allowance.describe()
    message = (
        f"{description[0].upper()}{description[1:]} is used up ({amount} spent {period}); "
        f"it resets at {utc(allowance.resets)}."
    )
    return QuotaExceeded(message, retry_after=max(1, math.ceil(allowance.resets - now)))
