"""Webhook deliveries in the store (SQLite, then PostgreSQL): one replica wins each claim, a
claim that lapsed (its replica died) is taken over, a failed attempt waits for its retry, and a
key sees its own deliveries only, newest first, a page at a time."""

from __future__ import annotations

import asyncio
import dataclasses

from hermes_core.persistence import Store
from hermes_core.persistence.webhooks import Delivery

NOW = 1_800_000_000.0


def _delivery(number: int, *, owner: str = "alice", at: float = NOW) -> Delivery:
    return Delivery(
        id=f"wh_{number:04d}",
        owner=owner,
        run_id=f"run_{number}",
        event_id=f"evt_{number}",
        event_type="run.completed",
        body="{}",
        url="https://hooks.example/x",
        source="request",
        secret="whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQ=",
        status="pending",
        attempts=0,
        next_attempt_at=at,
        last_status_code=None,
        last_error=None,
        created_at=at + number,
        delivered_at=None,
    )


async def test_one_replica_wins_each_claim(store: Store) -> None:
    await store.webhooks.add([_delivery(n) for n in range(6)])

    first, second = await asyncio.gather(
        store.webhooks.claim("a", now=NOW, lease_seconds=60, limit=10),
        store.webhooks.claim("b", now=NOW, lease_seconds=60, limit=10),
    )

    won = [d.id for d in first] + [d.id for d in second]
    assert sorted(won) == [f"wh_{n:04d}" for n in range(6)]
    assert await store.webhooks.claim("c", now=NOW + 1, lease_seconds=60, limit=10) == []


async def test_a_lapsed_claim_is_taken_over(store: Store) -> None:
    await store.webhooks.add([_delivery(1)])
    (held,) = await store.webhooks.claim("dead", now=NOW, lease_seconds=60, limit=10)

    assert await store.webhooks.claim("alive", now=NOW + 59, lease_seconds=60, limit=10) == []
    (taken,) = await store.webhooks.claim("alive", now=NOW + 61, lease_seconds=60, limit=10)
    assert taken.id == held.id


async def test_a_failed_attempt_waits_for_its_retry_then_is_delivered(store: Store) -> None:
    await store.webhooks.add([_delivery(1)])
    (claimed,) = await store.webhooks.claim("a", now=NOW, lease_seconds=60, limit=10)
    await store.webhooks.attempt_failed(
        claimed.id, status_code=500, error="the endpoint answered 500", retry_at=NOW + 2
    )

    assert await store.webhooks.claim("a", now=NOW + 1, lease_seconds=60, limit=10) == []
    (again,) = await store.webhooks.claim("b", now=NOW + 2, lease_seconds=60, limit=10)
    assert (again.attempts, again.last_status_code) == (1, 500)
    await store.webhooks.delivered(again.id, status_code=204, now=NOW + 3)

    (shown,) = await store.webhooks.of_run("alice", "run_1")
    assert (shown.status, shown.attempts, shown.delivered_at) == ("delivered", 2, NOW + 3)
    assert await store.webhooks.claim("a", now=NOW + 9, lease_seconds=60, limit=10) == []


async def test_attempts_run_out_into_failed(store: Store) -> None:
    await store.webhooks.add([_delivery(1)])
    (claimed,) = await store.webhooks.claim("a", now=NOW, lease_seconds=60, limit=10)
    await store.webhooks.attempt_failed(
        claimed.id, status_code=None, error="refused", retry_at=None
    )

    (shown,) = await store.webhooks.of_run("alice", "run_1")
    assert (shown.status, shown.last_error) == ("failed", "refused")
    assert await store.webhooks.claim("a", now=NOW + 3600, lease_seconds=60, limit=10) == []


async def test_a_key_pages_through_its_own_deliveries_newest_first(store: Store) -> None:
    await store.webhooks.add([_delivery(n) for n in range(5)])
    await store.webhooks.add([dataclasses.replace(_delivery(9, owner="bob"))])

    first, more = await store.webhooks.page("alice", after=None, limit=3)
    assert ([d.id for d in first], more) == (["wh_0004", "wh_0003", "wh_0002"], True)
    rest, more = await store.webhooks.page("alice", after=first[-1].id, limit=3)
    assert ([d.id for d in rest], more) == (["wh_0001", "wh_0000"], False)
    assert await store.webhooks.page("alice", after="wh_0009", limit=3) == ([], False)
    theirs, _ = await store.webhooks.page("bob", after=None, limit=10)
    assert [d.id for d in theirs] == ["wh_0009"]
