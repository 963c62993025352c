"""Runs of one key in flight on one replica share what was left of its budgets
(server/budgets/in_flight.py, docs/budgets.md): admission counts the ledger and what runs in
flight here have spent, a run's check counts what every run held to the budget spent since it
was admitted, and a run's spend leaves the tally when the ledger gains it.

In process, on a SQLite store: the engine's side is played by calling the spend limit as
``ModelStep.call`` does (``exceeded`` with the run's calls so far, before its next call)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from hermes_core.agent import AgentRequest
from hermes_core.events import CallRecord
from hermes_core.persistence import Store
from hermes_core.persistence.database import Database
from hermes_core.persistence.usage import Spent, UsageStore
from hermes_core.usage import Usage
from server.budgets.admission import Budgets
from server.budgets.allowance import HeldToBudgets
from server.errors import QuotaExceeded
from server.http.auth import Budget, Principal
from server.runs.manager import RunInfo
from server.usage.ledger import UsageLedger
from tests.server.run_endings import ending_of

NOW = 1_795_000_000.0  # 2026-11-18 (UTC)
TEAM = Principal("team", budget=Budget(tokens_per_day=1000))
DESK = Principal(
    "desk",
    trusted_front_end=True,
    budget=Budget(tokens_per_day=1000),
    end_user_budget=Budget(tokens_per_day=600),
)


@dataclass
class Replica:
    """One replica's budgets and ledger observer, sharing its in-flight tallies."""

    budgets: Budgets
    ledger: UsageLedger
    started: int = 0

    async def admit(self, principal: Principal = TEAM, end_user: str | None = None) -> Run:
        self.started += 1
        run_id = f"run_{self.started}"
        request = await self.budgets.admit(principal, end_user, AgentRequest(run_id=run_id))
        assert isinstance(request.spend_limit, HeldToBudgets)
        info = RunInfo(id=run_id, owner=principal.name, endpoint="chat.completions", model="m")
        info.end_user = end_user
        return Run(info, request.spend_limit, self.ledger)


@dataclass
class Run:
    info: RunInfo
    held: HeldToBudgets
    ledger: UsageLedger
    calls: list[CallRecord] = field(default_factory=list)

    def call(self, tokens: int) -> str | None:
        """Make a model call of ``tokens``; then the check before the next call: why the run
        must end, or None."""
        self.calls.append(_call(tokens))
        return self.held.exceeded(self.calls)

    def end(self) -> None:
        self.ledger.observe(self.info, ending_of(self.info.id, self.calls))


def _call(tokens: int) -> CallRecord:
    return CallRecord(
        provider="sim", model="m", usage=Usage(input_tokens=tokens), cost_usd=tokens / 1000
    )


def _replica(usage: UsageStore, ledger_store: UsageStore | None = None) -> Replica:
    budgets = Budgets(clock=lambda: NOW)
    budgets.store = usage
    ledger = UsageLedger(ledger_store or usage, in_flight=budgets.in_flight, clock=lambda: NOW)
    return Replica(budgets, ledger)


def _left(run: Run) -> list[float]:
    return [allowance.left for allowance in run.held.allowances]


async def test_runs_admitted_together_stop_once_their_combined_spend_reaches_what_was_left(
    store: Store,
) -> None:
    replica = _replica(store.usage)
    first, second = await replica.admit(), await replica.admit()

    assert first.call(300) is None
    assert second.call(300) is None
    assert first.call(300) is None  # 900 of 1000 between them
    why = second.call(300)

    assert why is not None
    assert why.startswith(
        "This run and others beside it used up what was left of the daily token budget of "
        "this API key (1000 tokens per UTC day): it resets at 2026-11-19T00:00:00Z"
    )
    assert first.held.exceeded(first.calls) is not None  # before its next call: it stops too


async def test_a_run_alone_is_told_it_used_up_the_budget_itself(store: Store) -> None:
    run = await _replica(store.usage).admit()

    assert run.call(600) is None
    why = run.call(600)

    assert why is not None
    assert why.startswith("This run used up what was left of the daily token budget")


async def test_a_run_started_once_runs_in_flight_spent_what_was_left_is_refused(
    store: Store,
) -> None:
    replica = _replica(store.usage)
    running = await replica.admit()
    assert running.call(1000) is not None  # in flight still: the ledger has none of it

    with pytest.raises(QuotaExceeded) as refused:
        await replica.admit()

    assert "is used up (1000 tokens spent today)" in refused.value.message
    other = Principal("other", budget=Budget(tokens_per_day=1000))
    assert _left(await replica.admit(other)) == [1000]  # another key's budget is its own


async def test_a_runs_spend_leaves_the_tally_when_the_ledger_gains_it(store: Store) -> None:
    replica = _replica(store.usage)
    ended = await replica.admit()
    assert ended.call(600) is None

    ended.end()
    later = await replica.admit()

    assert _left(later) == [400]  # 600 in the ledger, nothing in flight: counted once
    assert later.call(300) is None
    assert later.call(100) is not None


async def test_a_run_counts_what_runs_that_ended_since_it_was_admitted_spent(
    store: Store,
) -> None:
    replica = _replica(store.usage)
    waiting, busy = await replica.admit(), await replica.admit()
    assert busy.call(700) is None
    busy.end()  # its 700 moved to the ledger, which the waiting run never reads again

    assert waiting.call(300) is not None


async def test_a_sub_agents_calls_are_counted_once(store: Store) -> None:
    run = await _replica(store.usage).admit()
    own = _call(100)
    child = [_call(200), _call(300)]

    assert run.held.exceeded([own, *child[:1]]) is None  # the sub-agent's check, as it runs
    assert run.held.exceeded([own, *child]) is None
    assert run.held.exceeded([own, *child, _call(50)]) is None  # its calls now the parent's

    assert run.held.tokens == 650


async def test_an_end_users_spend_counts_against_the_key_and_that_end_user_alone(
    store: Store,
) -> None:
    replica = _replica(store.usage)
    ann = await replica.admit(DESK, "ann")
    assert ann.call(500) is None

    ben = await replica.admit(DESK, "ben")
    assert _left(ben) == [500, 600]  # the key's 1000 less ann's 500; ben's own 600 whole
    with_ann = await replica.admit(DESK, "ann")
    assert _left(with_ann) == [500, 100]
    assert ben.call(300) is None
    assert ann.call(100) is not None  # ann's 600 reached her own budget


async def test_a_key_without_a_budget_is_given_no_spend_limit_and_no_tally(store: Store) -> None:
    replica = _replica(store.usage)
    request = AgentRequest(run_id="run_free")

    admitted = await replica.budgets.admit(Principal("free"), None, request)

    assert admitted is request
    assert replica.budgets.in_flight.runs == {}


async def test_a_budgets_tally_goes_once_no_run_holds_it(store: Store) -> None:
    replica = _replica(store.usage)
    run = await replica.admit()
    assert run.call(100) is None
    tally = run.held.allowances[0].tally
    run.end()

    assert replica.budgets.in_flight.runs == {}
    assert tally.in_flight == 0
    del run, tally
    fresh = replica.budgets.in_flight.tally("team", None, "tokens_per_day", "2026-11-18")
    assert fresh.spent == 0


class _EndsDuringRead(UsageStore):
    """The ledger, read at the moment a run ends: the read comes too soon to see it."""

    def __init__(self, db: Database, ending: list[Callable[[], Any]]) -> None:
        super().__init__(db)
        self.ending = ending
        self.reads = 0

    async def spent(self, *args: Any, **kwargs: Any) -> Spent:
        spent = await super().spent(*args, **kwargs)
        self.reads += 1
        if self.ending:
            self.ending.pop()()
        return spent


async def test_admission_reads_the_ledger_again_when_a_run_ends_during_the_read(
    store: Store,
) -> None:
    ending: list[Callable[[], Any]] = []
    reading = _EndsDuringRead(store.db, ending)
    replica = _replica(reading, ledger_store=store.usage)
    run = await replica.admit()
    assert run.call(600) is None
    reading.reads = 0
    ending.append(run.end)

    later = await replica.admit()

    assert reading.reads == 2
    assert _left(later) == [400]  # not 1000: the run's 600 was in neither the read nor the tally
