"""A replica that wakes after being frozen past its lease does not tell of a run another
replica took over: that one's crash recovery declared the run interrupted and sent its
``run.failed``; the late ``run.cancelled`` of the run's own replica, whose ending the run's row
fenced off, would be a second, contradicting ending. A run its own replica ended is told of
as before. Finding out costs a read of the run's row, so it is asked only when the replica lost
its lease while the run went on: never by a server without replicas."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from hermes_core.events import ExitReason, RunFinished, RunStarted
from hermes_core.persistence import Store
from hermes_core.persistence.runs import RunStore
from hermes_core.tools.web.guard import AddressPolicy
from hermes_core.usage import Usage
from server.runs.manager import RunInfo
from server.webhooks.delivery import Dispatcher
from server.webhooks.events import RUN_EVENTS
from server.webhooks.service import RUNS_ENDPOINT, Webhooks, WebhookTarget

FROZEN = "replica-a"
OTHER = "replica-b"
TARGET = WebhookTarget(url="http://127.0.0.1:9/hooks", secret="whsec_test", events=RUN_EVENTS)


@pytest.fixture(autouse=True)
def _deliveries_kept_not_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is kept is what these tests read; the dispatcher is not woken to send it."""
    monkeypatch.setattr(Dispatcher, "wake", lambda _self: None)


@pytest.fixture
async def stores(database_url: str) -> AsyncIterator[tuple[Store, Store]]:
    """The frozen replica's store and the other replica's, on one database."""
    frozen = await Store.open(database_url, instance=FROZEN)
    other = await Store.open(database_url, instance=OTHER)
    try:
        yield frozen, other
    finally:
        await other.close()
        await frozen.close()


class Lease:
    """A replica's lease as its webhooks see it: how many times it was lost."""

    def __init__(self) -> None:
        self.losses = 0

    def count(self) -> int:
        return self.losses


def _webhooks(store: Store, lease_losses: Callable[[], int] | None) -> Webhooks:
    webhooks = Webhooks([TARGET])
    webhooks.open(store, instance=store.runs.instance, policy=AddressPolicy)
    webhooks.lease_losses = lease_losses  # as a replica's services set it
    return webhooks


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The runs whose rows webhooks read back to learn whether they were taken over."""
    asked: list[str] = []
    original = RunStore.taken_over

    async def taken_over(self: RunStore, owner: str, run_id: str) -> bool:
        asked.append(run_id)
        return await original(self, owner, run_id)

    monkeypatch.setattr(RunStore, "taken_over", taken_over)
    return asked


async def _start(store: Store, run_id: str, webhooks: Webhooks) -> RunInfo:
    store.runs.started(
        run_id=run_id,
        owner="alice",
        endpoint=RUNS_ENDPOINT,
        model="hermes-agent",
        session_id=None,
        completion_id=None,
        created_at=1000.0,
    )
    await store.db.writer.flush()
    info = RunInfo(id=run_id, owner="alice", endpoint=RUNS_ENDPOINT, model="hermes-agent")
    started = RunStarted(run_id=run_id, seq=0, task_id="task_1", model="m", provider="p", budget=3)
    webhooks.observe(info, started)
    return info


def _stopped(store: Store, webhooks: Webhooks, info: RunInfo, error: str) -> None:
    """The run's replica stops it: the journal writes its ending, then webhooks observe it
    (the run manager's order of observers)."""
    ending = RunFinished(
        run_id=info.id,
        seq=3,
        exit_reason=ExitReason.INTERRUPTED,
        final_text="",
        partial=True,
        iterations=1,
        usage=Usage(),
        model_calls=1,
        error=error,
    )
    store.runs.finished(
        info.id,
        status="interrupted",
        exit_reason="interrupted",
        iterations=1,
        model_calls=1,
        usage={},
        error=error,
    )
    webhooks.observe(info, ending)


async def test_a_woken_replica_sends_no_second_ending_for_a_run_another_replica_took_over(
    stores: tuple[Store, Store],
) -> None:
    frozen, other = stores
    lease = Lease()
    frozen_hooks, other_hooks = _webhooks(frozen, lease.count), _webhooks(other, Lease().count)
    try:
        info = await _start(frozen, "run_taken_over", frozen_hooks)
        # The frozen replica's lease lapsed: the other one recovers its run and tells of it.
        recovered = await other.runs.recover(FROZEN)
        await other_hooks.recovered(recovered)
        # The frozen replica wakes, finds its lease lost and stops the run.
        lease.losses += 1
        _stopped(frozen, frozen_hooks, info, "this replica lost its lease")
    finally:
        await frozen_hooks.close()  # waits for the events it was keeping
        await other_hooks.close()
    sent = await frozen.webhooks.of_run("alice", info.id)
    assert [delivery.event_type for delivery in sent] == ["run.failed"]


async def test_a_run_stopped_by_its_own_replica_is_told_of_as_cancelled(
    stores: tuple[Store, Store],
) -> None:
    frozen, _ = stores
    lease = Lease()
    webhooks = _webhooks(frozen, lease.count)
    try:
        info = await _start(frozen, "run_stopped", webhooks)
        lease.losses += 1  # read back, and found its own
        _stopped(frozen, webhooks, info, "stopped through the API")
    finally:
        await webhooks.close()
    sent = await frozen.webhooks.of_run("alice", info.id)
    assert [delivery.event_type for delivery in sent] == ["run.cancelled"]


async def test_a_run_of_a_replica_that_kept_its_lease_is_not_read_back(
    stores: tuple[Store, Store], reads: list[str]
) -> None:
    frozen, _ = stores
    lease = Lease()
    lease.losses = 1  # lost and taken again before the run started: not this run's concern
    webhooks = _webhooks(frozen, lease.count)
    try:
        info = await _start(frozen, "run_kept", webhooks)
        _stopped(frozen, webhooks, info, "stopped through the API")
    finally:
        await webhooks.close()
    sent = await frozen.webhooks.of_run("alice", info.id)
    assert [delivery.event_type for delivery in sent] == ["run.cancelled"]
    assert reads == []


async def test_a_server_without_replicas_never_reads_a_run_back(
    stores: tuple[Store, Store], reads: list[str]
) -> None:
    alone, _ = stores
    webhooks = _webhooks(alone, None)
    try:
        info = await _start(alone, "run_alone", webhooks)
        _stopped(alone, webhooks, info, "stopped through the API")
    finally:
        await webhooks.close()
    sent = await alone.webhooks.of_run("alice", info.id)
    assert [delivery.event_type for delivery in sent] == ["run.cancelled"]
    assert reads == []
