"""A replica that wakes after being frozen past its lease does not tell of a run another
replica took over: that one's crash recovery declared the run interrupted and sent its
``run.failed``; the late ``run.cancelled`` of the run's own replica, whose ending the run's row
fenced off, would be a second, contradicting ending. A run its own replica ended is told of
as before."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermes_core.events import ExitReason, RunFinished
from hermes_core.persistence import Store
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


def _webhooks(store: Store) -> Webhooks:
    webhooks = Webhooks([TARGET])
    webhooks.open(store, instance=store.runs.instance, policy=AddressPolicy)
    return webhooks


async def _start(store: Store, run_id: str) -> RunInfo:
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
    return RunInfo(id=run_id, owner="alice", endpoint=RUNS_ENDPOINT, model="hermes-agent")


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
    frozen_hooks, other_hooks = _webhooks(frozen), _webhooks(other)
    try:
        info = await _start(frozen, "run_taken_over")
        # The frozen replica's lease lapsed: the other one recovers its run and tells of it.
        recovered = await other.runs.recover(FROZEN)
        await other_hooks.recovered(recovered)
        # The frozen replica wakes, finds its lease lost and stops the run.
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
    webhooks = _webhooks(frozen)
    try:
        info = await _start(frozen, "run_stopped")
        _stopped(frozen, webhooks, info, "stopped through the API")
    finally:
        await webhooks.close()
    sent = await frozen.webhooks.of_run("alice", info.id)
    assert [delivery.event_type for delivery in sent] == ["run.cancelled"]
