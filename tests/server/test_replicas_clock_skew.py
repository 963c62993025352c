"""Replicas whose clocks disagree, on one real Redis, in process: a key's run reservations
lapse by Redis's clock, so a replica whose clock runs ahead does not expire another's
reservation early (letting the key past its limit), and one whose clock is behind does not
write, or renew, its own lapsed already."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import pytest
import redis.asyncio as aioredis

from hermes_core.providers.retry import Cooldowns
from server.replicas.cluster import Cluster
from server.replicas.reservations import RUNS_KEY
from tests.redis_server import redis_url_or_skip

HOUR = 3600.0


async def _no_instances() -> set[str]:
    return set()


async def _recover_none(_instance: str) -> int:
    return 0


class Replicas:
    """Replicas' links to one Redis, started as ``serve`` starts them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.started: list[Cluster] = []

    async def start(
        self,
        live_runs: Callable[[], list[tuple[str, str]]] = list,
        *,
        lease_seconds: float = 5,
    ) -> Cluster:
        cluster = Cluster(
            self.url, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=lease_seconds
        )
        await cluster.start(
            on_stop=lambda *_: None,
            recover=_recover_none,
            live_instances=_no_instances,
            live_runs=live_runs,
            cooldowns=Cooldowns(),
        )
        self.started.append(cluster)
        return cluster


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    made = Replicas(redis_url_or_skip())
    yield made
    for cluster in made.started:
        await cluster.close()


SKEW: ContextVar[float] = ContextVar("skew", default=0.0)
"""How far the clock of the replica acting is off: each replica's tasks keep the value set
when it started (a task copies its context), so each replica has a clock of its own."""


@pytest.fixture(autouse=True)
def replicas_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + SKEW.get())


@contextmanager
def clock_off_by(seconds: float) -> Iterator[None]:
    """The clock of what runs in the block (and of a replica started in it) off by
    ``seconds``."""
    token = SKEW.set(seconds)
    try:
        yield
    finally:
        SKEW.reset(token)


async def _redis_time(redis: aioredis.Redis) -> float:
    seconds, microseconds = await redis.time()
    return seconds + microseconds / 1_000_000


async def test_a_replica_whose_clock_runs_ahead_does_not_expire_another_s_reservation(
    replicas: Replicas,
) -> None:
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    a = await replicas.start()
    assert await a.reserve(owner, "run_a", 1)
    with clock_off_by(+HOUR):  # B's clock: an hour past A's lease
        b = await replicas.start()
        assert not await b.reserve(owner, "run_b", 1)  # A's run still counts
        assert await b.reserved_run(owner, "run_a") == "run_a"
    assert await a.reserved_run(owner, "run_a") == "run_a"


async def test_a_reservation_made_and_renewed_by_a_replica_whose_clock_is_behind_holds(
    replicas: Replicas,
) -> None:
    owner, run_id = f"owner-{uuid.uuid4().hex[:8]}", f"run_{uuid.uuid4().hex}"
    a = await replicas.start()
    with clock_off_by(-HOUR):  # B's clock: an hour behind
        b = await replicas.start(lambda: [(owner, run_id)], lease_seconds=1)
        assert await b.reserve(owner, run_id, 1)
    redis = aioredis.from_url(replicas.url)
    try:
        first: float | None = await redis.zscore(RUNS_KEY.format(owner), run_id)
        assert first is not None
        deadline = time.monotonic() + 30
        while await _redis_time(redis) <= first + 0.5:  # past its first lapse: renewed since
            assert time.monotonic() < deadline, "Redis's clock never passed the first lapse"
            await asyncio.sleep(0.05)
    finally:
        await redis.aclose()
    assert await a.reserved_run(owner, run_id) == run_id
    assert not await a.reserve(owner, "run_a", 1)  # B's run still counts
