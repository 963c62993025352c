"""The scheduler in process, on a real store and an injected clock: a due cron is fired once
by two schedulers at once, a firing missed while everything was down is fired once for its
most recent time within the grace and older ones are skipped, and a claim whose replica died
before starting its run is retaken after its lease."""

from __future__ import annotations

import asyncio
import datetime as dt
from types import SimpleNamespace
from typing import Any, cast

from starlette.requests import HTTPConnection

from hermes_core.persistence import Store
from hermes_core.persistence.crons import Cron
from server.crons.expression import parse
from server.crons.scheduler import CRON_ID_KEY, INTERNAL, NO_KEY, CronScheduler
from server.errors import RunLimitExceeded, ServerDraining
from server.http.auth import Budget, KeyRing, Principal
from server.protocol.schemas.runs import RunCreateRequest
from server.services import Services

T0 = dt.datetime(2027, 1, 4, 12, 0, tzinfo=dt.UTC).timestamp()
"""A Monday noon, UTC."""


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Starts:
    """Stands for ``start_api_run``: records the runs it was asked to start."""

    def __init__(self) -> None:
        self.bodies: list[RunCreateRequest] = []
        self.principals: list[Principal] = []

    async def __call__(
        self, _services: Services, _connection: HTTPConnection, who: Principal, body: Any
    ) -> tuple[dict[str, Any], dict[str, str]]:
        self.bodies.append(body)
        self.principals.append(who)
        return {"id": f"run_{len(self.bodies)}"}, {}


ALICE = Principal("alice", frozenset({"hermes-agent"}), budget=Budget(tokens_per_day=1000))
"""The configured principal of the key that made the crons (with a budget and profiles)."""


def scheduler(
    store: Store,
    starts: Any,
    clock: Clock,
    instance: str = "a",
    *,
    draining: bool = False,
    keyring: KeyRing | None = None,
) -> CronScheduler:
    # Whether it drains and the keys are read; the rest is handed to the start function.
    keys = keyring if keyring is not None else KeyRing({"sk-alice": ALICE})
    services = cast(
        Services, SimpleNamespace(runs=SimpleNamespace(draining=draining), keyring=keys)
    )
    return CronScheduler(services, store, starts, instance=instance, clock=clock)


async def _cron(store: Store, schedule: str, *, next_fire_at: float) -> Cron:
    cron = Cron(
        id="cron_1",
        owner="alice",
        schedule=schedule,
        timezone="UTC",
        model="hermes-agent",
        body={"input": "tick", "session": None, "metadata": {"job": "j"}, "webhook": None},
        paused=False,
        next_fire_at=next_fire_at,
        created_at=T0 - 86400,
        updated_at=T0 - 86400,
    )
    await store.crons.add(cron)
    return cron


async def test_two_schedulers_fire_a_due_cron_once(store: Store) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    starts, clock = Starts(), Clock(T0 + 1)

    await asyncio.gather(
        scheduler(store, starts, clock, "a").tick(), scheduler(store, starts, clock, "b").tick()
    )

    assert len(starts.bodies) == 1
    assert starts.bodies[0].metadata == {"job": "j", CRON_ID_KEY: "cron_1"}
    (firing,) = await store.crons.firings("alice", "cron_1")
    assert (firing.scheduled_at, firing.status, firing.run_id) == (T0, "started", "run_1")
    cron = await store.crons.get("alice", "cron_1")
    assert cron is not None
    assert cron.next_fire_at == T0 + 300


async def test_a_firing_missed_within_the_grace_fires_once_for_its_most_recent_time(
    store: Store,
) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    starts, clock = Starts(), Clock(T0 + 20 * 60 + 34)  # down 20 minutes: 5 times missed

    await scheduler(store, starts, clock).tick()

    assert len(starts.bodies) == 1
    (firing,) = await store.crons.firings("alice", "cron_1")
    assert firing.scheduled_at == T0 + 20 * 60
    cron = await store.crons.get("alice", "cron_1")
    assert cron is not None
    assert cron.next_fire_at == T0 + 25 * 60


async def test_firings_missed_beyond_the_grace_are_skipped(store: Store) -> None:
    await _cron(store, "0 3 * * *", next_fire_at=T0 - 9 * 3600)  # 03:00 today
    starts, clock = Starts(), Clock(T0 + 2 * 86400)  # down two and a half days

    await scheduler(store, starts, clock).tick()

    assert starts.bodies == []
    assert await store.crons.firings("alice", "cron_1") == []
    cron = await store.crons.get("alice", "cron_1")
    assert cron is not None
    assert cron.next_fire_at == T0 + 3 * 86400 - 9 * 3600


async def test_a_claim_whose_replica_died_before_its_run_is_retaken_after_the_lease(
    store: Store,
) -> None:
    cron = await _cron(store, "*/5 * * * *", next_fire_at=T0)
    # Replica "dead" claimed the firing and died before starting its run.
    await store.crons.claim(
        cron,
        scheduled_at=T0,
        next_fire_at=T0 + 300,
        firing_id="fire_1",
        instance="dead",
        now=T0,
        lease_seconds=60,
    )
    starts, clock = Starts(), Clock(T0 + 30)
    alive = scheduler(store, starts, clock, "alive")
    await alive.tick()
    assert starts.bodies == []  # the claim still holds

    clock.now = T0 + 61
    alive._next_retake = 0.0  # look now, not at its next periodic retake
    await alive.tick()
    clock.now = T0 + 200
    alive._next_retake = 0.0
    await alive.tick()

    assert len(starts.bodies) == 1
    (firing,) = await store.crons.firings("alice", "cron_1")
    assert (firing.id, firing.status, firing.run_id) == ("fire_1", "started", "run_1")


async def test_after_firing_its_only_due_cron_the_scheduler_looks_again_at_once(
    store: Store,
) -> None:
    # The cron has moved on to its next time: the pass must not sleep its longest pause,
    # or an every-minute cron would wait on the scheduler instead of the clock.
    await _cron(store, "* * * * *", next_fire_at=T0)
    starts, clock = Starts(), Clock(T0 + 1)
    firing = scheduler(store, starts, clock)

    assert await firing.tick() == T0 + 1  # at once
    assert await firing.tick() == T0 + 60  # then when the cron is next due
    assert len(starts.bodies) == 1


async def test_no_cron_means_one_query_and_a_bounded_sleep(store: Store) -> None:
    starts, clock = Starts(), Clock(T0)

    assert await scheduler(store, starts, clock).tick() is None
    assert starts.bodies == []


def test_a_schedule_is_read_in_its_time_zone_and_skips_a_missing_wall_time() -> None:
    paris = parse("30 2 * * *", "Europe/Paris")
    before = dt.datetime(2026, 3, 28, 12, tzinfo=dt.UTC).timestamp()

    following = paris.next_after(before)

    assert following is not None  # 29 March 02:30 does not exist there (clocks go forward)
    local = dt.datetime.fromtimestamp(following, paris.zone)
    assert (local.month, local.day, local.hour, local.minute) == (3, 30, 2, 30)


async def test_a_firing_a_stopping_replica_could_not_start_is_started_by_another_at_once(
    store: Store,
) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    clock = Clock(T0 + 1)

    async def draining(*_: Any) -> tuple[dict[str, Any], dict[str, str]]:
        raise ServerDraining()

    await scheduler(store, draining, clock, "stopping").tick()
    starts = Starts()
    await scheduler(store, starts, clock, "other").tick()

    assert len(starts.bodies) == 1
    (firing,) = await store.crons.firings("alice", "cron_1")
    assert (firing.claimed_by, firing.status, firing.run_id) == ("other", "started", "run_1")


async def test_a_draining_replica_claims_nothing(store: Store) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    starts = Starts()

    await scheduler(store, starts, Clock(T0 + 1), draining=True).tick()

    assert starts.bodies == []
    assert await store.crons.firings("alice", "cron_1") == []


async def test_a_firing_runs_as_its_key_is_configured_now_with_its_budget_and_profiles(
    store: Store,
) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    starts = Starts()

    await scheduler(store, starts, Clock(T0 + 1)).tick()

    assert starts.principals == [ALICE]  # not a bare name that no budget or profile list holds


async def test_a_cron_whose_key_was_removed_starts_no_run_and_its_firing_says_why(
    store: Store,
) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    starts = Starts()
    others_only = KeyRing({"sk-bob": Principal("bob")})

    await scheduler(store, starts, Clock(T0 + 1), keyring=others_only).tick()

    assert starts.bodies == []
    (firing,) = await store.crons.firings("alice", "cron_1")
    assert (firing.status, firing.error) == ("failed", NO_KEY)


class Refusing:
    """Stands for ``start_api_run`` refusing every run with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def __call__(self, *_: Any) -> tuple[dict[str, Any], dict[str, str]]:
        raise self.error


async def test_a_firing_refused_by_the_keys_run_limit_keeps_the_code_a_request_would_get(
    store: Store,
) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    limit = RunLimitExceeded("This key already has 4 runs in progress.", retry_after=1)

    await scheduler(store, Refusing(limit), Clock(T0 + 1)).tick()

    (firing,) = await store.crons.firings("alice", "cron_1")
    assert (firing.status, firing.error_code, firing.error) == (
        "failed",
        "rate_limit_exceeded",
        "This key already has 4 runs in progress.",
    )


async def test_a_firing_failed_on_an_internal_error_keeps_none_of_its_text(store: Store) -> None:
    await _cron(store, "*/5 * * * *", next_fire_at=T0)
    leaking = RuntimeError("INSERT … parameters: ('whsec_the-webhook-secret', 'bob')")

    await scheduler(store, Refusing(leaking), Clock(T0 + 1)).tick()

    (firing,) = await store.crons.firings("alice", "cron_1")
    assert (firing.status, firing.error_code, firing.error) == ("failed", "server_error", INTERNAL)
