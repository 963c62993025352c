"""Runs of one key share what was left of its budgets (server/budgets/, docs/budgets.md): the
ledger gains each call as a run counts it, so admission (which reads the ledger) sees every
counted call, the running runs' too, on this replica and any other; a run's check counts what
every run held to the budget on this replica spent since it was admitted.

In process, on a SQLite store: the engine's side is played by calling the request's
``on_call`` as ``ActiveRun.count`` does (with each call as it is counted) and its spend limit
as ``ModelStep.call`` does (``exceeded`` with the run's calls so far, before its next call)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from hermes_core.agent import AgentRequest
from hermes_core.agent.config import CallHook
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
    """One replica's budgets and ledger, its runs started as ``start_run`` starts them."""

    budgets: Budgets
    ledger: UsageLedger
    name: str = "a"
    started: int = 0

    async def admit(self, principal: Principal = TEAM, end_user: str | None = None) -> Run:
        self.started += 1
        run_id = f"run_{self.name}{self.started}"
        counter = self.ledger.counter(run_id, principal.name, end_user, "m")
        request = AgentRequest(run_id=run_id, on_call=counter)
        request = await self.budgets.admit(principal, end_user, request)
        assert isinstance(request.spend_limit, HeldToBudgets)
        assert request.on_call is not None
        info = RunInfo(id=run_id, owner=principal.name, endpoint="chat.completions", model="m")
        info.end_user = end_user
        return Run(info, request.spend_limit, request.on_call, self.ledger)


@dataclass
class Run:
    info: RunInfo
    held: HeldToBudgets
    on_call: CallHook
    ledger: UsageLedger
    calls: list[CallRecord] = field(default_factory=list)

    def call(self, tokens: int) -> str | None:
        """Make a model call of ``tokens``; then the check before the next call: why the run
        must end, or None."""
        self.count(_call(tokens))
        return self.held.exceeded(self.calls)

    def count(self, call: CallRecord) -> None:
        self.calls.append(call)
        self.on_call(call)

    def end(self) -> None:
        self.ledger.observe(self.info, ending_of(self.info.id, self.calls))


def _call(tokens: int) -> CallRecord:
    return CallRecord(
        provider="sim", model="m", usage=Usage(input_tokens=tokens), cost_usd=tokens / 1000
    )


def _replica(usage: UsageStore, ledger_store: UsageStore | None = None, name: str = "a") -> Replica:
    budgets = Budgets(clock=lambda: NOW)
    budgets.store = usage
    ledger = UsageLedger(ledger_store or usage, clock=lambda: NOW)
    return Replica(budgets, ledger, name)


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


async def test_a_run_started_once_running_runs_spent_what_was_left_is_refused(
    store: Store,
) -> None:
    replica = _replica(store.usage)
    running = await replica.admit()
    assert running.call(1000) is not None  # still running: its call is in the ledger already

    with pytest.raises(QuotaExceeded) as refused:
        await replica.admit()

    assert "is used up (1000 tokens spent today)" in refused.value.message
    other = Principal("other", budget=Budget(tokens_per_day=1000))
    assert _left(await replica.admit(other)) == [1000]  # another key's budget is its own


async def test_a_running_runs_calls_are_seen_by_admission_on_another_replica(
    store: Store,
) -> None:
    here, there = _replica(store.usage, name="a"), _replica(store.usage, name="b")
    running = await here.admit()
    assert running.call(700) is None

    elsewhere = await there.admit()

    assert _left(elsewhere) == [300]


async def test_a_runs_ending_adds_nothing_its_calls_did_not_already(store: Store) -> None:
    replica = _replica(store.usage)
    ended = await replica.admit()
    assert ended.call(600) is None

    ended.end()
    later = await replica.admit()

    assert _left(later) == [400]  # 600 in the ledger once: counted as it was made
    assert later.call(300) is None
    assert later.call(100) is not None


async def test_a_run_counts_what_runs_that_ended_since_it_was_admitted_spent(
    store: Store,
) -> None:
    replica = _replica(store.usage)
    waiting, busy = await replica.admit(), await replica.admit()
    assert busy.call(700) is None
    busy.end()  # its 700 is in the ledger, which the waiting run never reads again

    assert waiting.call(300) is not None


async def test_a_sub_agents_calls_are_counted_once(store: Store) -> None:
    run = await _replica(store.usage).admit()
    own = _call(100)
    child = [_call(200), _call(300)]
    run.count(own)
    tally = run.held.allowances[0].tally

    assert run.held.exceeded([own, *child[:1]]) is None  # the sub-agent's checks, as it runs
    assert run.held.exceeded([own, *child]) is None
    for call in child:  # it ended: its calls are the parent's (``count_child_calls``)
        run.count(call)
    assert run.held.exceeded(run.calls) is None
    run.count(_call(50))

    assert (run.held.tokens, tally.spent) == (650, 650)


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


async def test_a_key_without_a_budget_is_given_no_spend_limit(store: Store) -> None:
    replica = _replica(store.usage)
    request = AgentRequest(run_id="run_free")

    admitted = await replica.budgets.admit(Principal("free"), None, request)

    assert admitted is request


async def test_a_budgets_tally_goes_once_no_run_holds_it(store: Store) -> None:
    replica = _replica(store.usage)
    run = await replica.admit()
    assert run.call(100) is None
    tally = run.held.allowances[0].tally
    run.end()

    del run, tally
    fresh = replica.budgets.tallies.tally("team", None, "tokens_per_day", "2026-11-18")
    assert fresh.spent == 0


class _CountsDuringRead(UsageStore):
    """The ledger, read while a run counts a call: the read comes too soon to see it."""

    def __init__(self, db: Database, counting: list[Callable[[], Any]]) -> None:
        super().__init__(db)
        self.counting = counting

    async def spent(self, *args: Any, **kwargs: Any) -> Spent:
        spent = await super().spent(*args, **kwargs)
        if self.counting:
            self.counting.pop()()
        return spent


async def test_a_call_counted_while_admission_reads_the_ledger_is_in_the_runs_check(
    store: Store,
) -> None:
    counting: list[Callable[[], Any]] = []
    replica = _replica(_CountsDuringRead(store.db, counting), ledger_store=store.usage)
    running = await replica.admit()
    counting.append(lambda: running.call(600))

    later = await replica.admit()

    assert _left(later) == [1000]  # the read missed the 600 ...
    assert later.call(400) is not None  # ... the check did not
