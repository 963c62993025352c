"""Schedules in the store (SQLite, then PostgreSQL): one replica wins each firing, a claim
whose replica died before starting its run is retaken after its lease while one with a run
never is, a time fired once is not fired again, and a key pages its own crons only."""

from __future__ import annotations

import asyncio

from hermes_core.persistence import Store
from hermes_core.persistence.crons import Cron, Firing

NOW = 1_800_000_000.0


def _cron(number: int, *, owner: str = "alice", next_fire_at: float = NOW) -> Cron:
    return Cron(
        id=f"cron_{number:04d}",
        owner=owner,
        schedule="* * * * *",
        timezone="UTC",
        model="hermes-agent",
        body={"input": "hello", "session": None, "metadata": {}, "webhook": None},
        paused=False,
        next_fire_at=next_fire_at,
        created_at=NOW + number,
        updated_at=NOW + number,
    )


async def _claim(
    store: Store, cron: Cron, instance: str, *, at: float = NOW, now: float = NOW
) -> Firing | None:
    return await store.crons.claim(
        cron,
        scheduled_at=at,
        next_fire_at=at + 60,
        firing_id=f"fire_{instance}_{at}",
        instance=instance,
        now=now,
        lease_seconds=60,
    )


async def test_two_replicas_claim_a_due_cron_and_one_wins(store: Store) -> None:
    await store.crons.add(_cron(1))
    (read,) = await store.crons.earliest(10)

    first, second = await asyncio.gather(_claim(store, read, "a"), _claim(store, read, "b"))

    assert [f for f in (first, second) if f is not None] != []
    assert (first is None) != (second is None)
    (after,) = await store.crons.earliest(10)
    assert after.next_fire_at == NOW + 60
    assert len(await store.crons.firings("alice", read.id)) == 1


async def test_a_time_already_fired_is_not_fired_again(store: Store) -> None:
    await store.crons.add(_cron(1))
    (read,) = await store.crons.earliest(10)
    assert await _claim(store, read, "a") is not None
    # The cron moved back to the same time (an update): the firing's unique time still holds.
    rewound = await store.crons.change("alice", read.id, next_fire_at=NOW)
    assert rewound is not None

    assert await _claim(store, rewound, "b") is None


async def test_a_claim_without_a_run_is_retaken_after_its_lease(store: Store) -> None:
    await store.crons.add(_cron(1))
    (read,) = await store.crons.earliest(10)
    held = await _claim(store, read, "dead")
    assert held is not None

    assert await store.crons.retake("alive", now=NOW + 59, lease_seconds=60) == []
    (taken,) = await store.crons.retake("alive", now=NOW + 61, lease_seconds=60)
    assert (taken.id, taken.claimed_by) == (held.id, "alive")
    assert await store.crons.retake("other", now=NOW + 62, lease_seconds=60) == []


async def test_a_firing_whose_run_started_is_never_retaken(store: Store) -> None:
    await store.crons.add(_cron(1))
    (read,) = await store.crons.earliest(10)
    held = await _claim(store, read, "a")
    assert held is not None
    await store.crons.started(held.id, "run_1")

    assert await store.crons.retake("b", now=NOW + 3600, lease_seconds=60) == []
    (firing,) = await store.crons.firings("alice", read.id)
    assert (firing.status, firing.run_id) == ("started", "run_1")


async def test_a_paused_cron_is_neither_due_nor_claimed(store: Store) -> None:
    await store.crons.add(_cron(1))
    (read,) = await store.crons.earliest(10)
    await store.crons.change("alice", read.id, paused=True)

    assert await store.crons.earliest(10) == []
    assert await _claim(store, read, "a") is None


async def test_a_key_pages_its_own_crons_newest_first(store: Store) -> None:
    for number in range(5):
        await store.crons.add(_cron(number))
    await store.crons.add(_cron(9, owner="bob"))

    first, more = await store.crons.page("alice", after=None, limit=3)
    rest, more_after = await store.crons.page("alice", after=first[-1].id, limit=3)

    assert [c.id for c in first + rest] == [f"cron_{n:04d}" for n in (4, 3, 2, 1, 0)]
    assert (more, more_after) == (True, False)
    assert await store.crons.get("bob", "cron_0001") is None
    assert not await store.crons.remove("bob", "cron_0001")
    assert await store.crons.remove("alice", "cron_0001")


async def test_a_renewed_claim_is_not_retaken_and_only_its_holder_renews_it(store: Store) -> None:
    await store.crons.add(_cron(1))
    (read,) = await store.crons.earliest(10)
    held = await _claim(store, read, "slow")
    assert held is not None

    assert await store.crons.renew(held.id, "slow", until=NOW + 120)
    assert not await store.crons.renew(held.id, "other", until=NOW + 500)
    assert await store.crons.retake("other", now=NOW + 90, lease_seconds=60) == []
    assert len(await store.crons.retake("other", now=NOW + 121, lease_seconds=60)) == 1
    assert not await store.crons.renew(held.id, "slow", until=NOW + 200)  # lost it
