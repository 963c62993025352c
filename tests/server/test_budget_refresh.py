"""With replicas, runs held to a budget learn as they go what the runs on other replicas spend
of it (server/budgets/refresh.py, docs/budgets.md "Across replicas"): while runs here are held
to a budget, the replica reads its total from the ledger every few seconds, and takes what it
grew by, less what this replica's runs added, as the others' spend.

In process, on a fake ledger: this replica's calls reach it as they are counted (as a flushed
write queue has them), and a test moves its totals for what the other replicas spend. Runs
are played as in test_budget_tallies.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest

from hermes_core.persistence.usage import Spent, UsageEntry, UsageStore
from server.budgets.admission import Budgets
from server.usage.ledger import UsageLedger
from tests.server.test_budget_tallies import NOW, Replica, _call

REFRESH = 0.01
"""Seconds between reads of the ledger: short, so that the tests wait on reads, not time."""


class Ledger(UsageStore):
    """The shared ledger, as one replica sees it."""

    def __init__(self) -> None:  # no database: the totals are these
        self.tokens = 0
        self.cost_usd = 0.0
        self.reads = 0
        """Reads begun (admission's and the refreshers')."""
        self.down = False
        """Reads fail, as they do while the database is down."""

    def add(self, entries: Sequence[UsageEntry]) -> None:
        for entry in entries:
            self.tokens += entry.usage.input_tokens + entry.usage.output_tokens
            self.cost_usd += entry.cost_usd

    async def spent(self, *args: Any, **kwargs: Any) -> Spent:
        self.reads += 1
        await asyncio.sleep(0)  # a read takes a moment: runs go on meanwhile
        if self.down:
            raise ConnectionError("the database is down")
        return Spent(self.tokens, self.cost_usd)


async def until(holds: Callable[[], bool], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not holds():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(REFRESH / 2)
    return True


async def read_again(ledger: Ledger) -> None:
    """Until the ledger has been read twice more: one read begun after now has been applied
    (a refresher applies a read before it begins the next)."""
    reads = ledger.reads
    assert await until(lambda: ledger.reads >= reads + 2)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def _replica(ledger: Ledger, refresh: float | None) -> Replica:
    budgets = Budgets(clock=lambda: NOW, refresh_seconds=refresh)
    budgets.store = ledger
    return Replica(budgets, UsageLedger(ledger, clock=lambda: NOW))


@pytest.fixture
async def replica(ledger: Ledger) -> AsyncIterator[Replica]:
    """A replica with others (its budgets refresh), of a key with 1000 tokens a day."""
    replica = _replica(ledger, REFRESH)
    yield replica
    await replica.budgets.close()


async def test_a_run_stops_before_its_next_call_once_other_replicas_spent_what_was_left(
    replica: Replica, ledger: Ledger
) -> None:
    run = await replica.admit()
    assert run.call(100) is None

    ledger.tokens += 900  # runs of the key on other replicas
    await read_again(ledger)

    why = run.held.exceeded(run.calls)
    assert why is not None
    assert why.startswith(
        "This run and others beside it used up what was left of the daily token budget"
    )


async def test_this_replicas_own_calls_are_not_counted_twice(
    replica: Replica, ledger: Ledger
) -> None:
    run = await replica.admit()
    tally = run.held.allowances[0].tally
    for _ in range(3):
        assert run.call(300) is None
        await read_again(ledger)

    assert tally.others == 0
    assert run.call(99) is None  # 999 of 1000
    assert run.call(1) is not None


async def test_a_sub_agents_calls_are_not_taken_for_another_replicas(
    replica: Replica, ledger: Ledger
) -> None:
    run = await replica.admit()
    child = [_call(300), _call(300)]
    assert run.held.exceeded(child) is None  # its checks, as it runs: not in the ledger yet
    await read_again(ledger)

    for call in child:  # it ended: its calls reach the ledger now
        run.count(call)
    await read_again(ledger)

    assert run.held.allowances[0].tally.others == 0
    assert run.call(399) is None  # 999 of 1000


async def test_a_run_admitted_between_reads_does_not_count_again_what_it_was_admitted_with(
    replica: Replica, ledger: Ledger
) -> None:
    running = await replica.admit()
    await read_again(ledger)
    ledger.tokens += 300  # elsewhere, after the last read

    admitted = await replica.admit()
    await read_again(ledger)

    assert admitted.held.allowances[0].left == 700
    assert admitted.call(699) is None  # the 300 is in what was left, not spent since
    assert admitted.call(1) is not None
    assert running.held.exceeded(running.calls) is not None  # 300 + 700 since it was admitted


async def test_one_refresher_per_budget_ends_when_its_last_run_ends(
    replica: Replica, ledger: Ledger
) -> None:
    first, second = await replica.admit(), await replica.admit()
    refreshers = replica.budgets.refreshers
    assert len(refreshers) == 1
    await read_again(ledger)

    first.end()
    del first
    await read_again(ledger)
    assert len(refreshers) == 1  # the second still runs

    second.end()
    del second

    assert await until(lambda: not refreshers)


async def test_a_server_alone_reads_the_ledger_only_at_admission(ledger: Ledger) -> None:
    replica = _replica(ledger, refresh=None)
    run = await replica.admit()
    assert run.call(100) is None
    ledger.tokens += 900

    assert not replica.budgets.refreshers
    assert ledger.reads == 1
    assert run.call(100) is None  # what others spend is seen at admission only


async def test_a_failing_ledger_is_logged_once_and_its_runs_go_on(
    replica: Replica, ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hermes.budgets")
    run = await replica.admit()
    ledger.down = True
    ledger.tokens += 970
    for _ in range(3):
        await read_again(ledger)
        assert run.call(10) is None

    ledger.down = False
    await read_again(ledger)

    assert [record.message for record in caplog.records] == [
        "cannot read the usage ledger: runs here do not learn what other replicas spend of "
        "their budgets until it can be read again",
        "the usage ledger can be read again",
    ]
    assert run.held.exceeded(run.calls) is not None  # 30 + 970: it learnt once it could read


async def test_a_reloaded_refresh_interval_applies_at_once_to_budgets_being_refreshed(
    ledger: Ledger,
) -> None:
    replica = _replica(ledger, refresh=3600)  # an hour between reads
    try:
        run = await replica.admit()
        reads = ledger.reads  # admission's
        replica.budgets.reload_refresh(REFRESH)  # limits.budget_refresh_seconds reloaded

        assert await until(lambda: ledger.reads >= reads + 2)
        assert replica.budgets.refresh_seconds == REFRESH
        run.end()
    finally:
        await replica.budgets.close()


async def test_a_reloaded_refresh_interval_leaves_a_server_alone_reading_only_at_admission(
    ledger: Ledger,
) -> None:
    replica = _replica(ledger, refresh=None)
    replica.budgets.reload_refresh(REFRESH)
    await replica.admit()

    assert replica.budgets.refresh_seconds is None
    assert not replica.budgets.refreshers
