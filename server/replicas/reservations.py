"""Per-key run limits across replicas: a key's live runs, counted in Redis.

A run is reserved in ``hermes:runs:<owner>`` before it starts (one Lua script checks the count
and adds, so replicas admitting at once cannot both pass), its replica renews it with its lease,
and it is released when the run ends. A reservation lapses unless renewed: a replica that dies
takes its reservations with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis.asyncio as aioredis

RUNS_KEY = "hermes:runs:{}"
"""A key's live runs on every replica: a sorted set of run ids scored by when each
reservation lapses unless its replica renews it."""

# Check and reserve in one step, so that two replicas admitting at once cannot both pass.
_RESERVE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""

LiveRuns = Callable[[], list[tuple[str, str]]]
"""``(owner, run_id)`` of this replica's runs in progress."""


class Reservations:
    """This replica's runs as counted against their keys' limits on every replica."""

    def __init__(self, redis: aioredis.Redis, *, lease_seconds: float) -> None:
        self._redis = redis
        self._lease_seconds = lease_seconds
        self._reserve = redis.register_script(_RESERVE)
        self._live_runs: LiveRuns = list

    def track(self, live_runs: LiveRuns) -> None:
        """Renew the reservations of ``live_runs()`` at each :meth:`renew`."""
        self._live_runs = live_runs

    async def reserve(self, owner: str, run_id: str, limit: int) -> bool:
        """Count ``run_id`` among ``owner``'s live runs on all replicas, unless ``limit`` are
        live already (then False). The reservation lapses after a lease unless renewed."""
        now = time.time()
        lease_ms = round(self._lease_seconds * 1000)
        reserved = await self._reserve(
            keys=[RUNS_KEY.format(owner)],
            args=[now, now + self._lease_seconds, limit, run_id, 2 * lease_ms],
        )
        return bool(reserved)

    async def release(self, owner: str, run_id: str) -> None:
        await self._redis.zrem(RUNS_KEY.format(owner), run_id)

    async def renew(self) -> None:
        """Push the lapse of this replica's live runs' reservations a lease ahead (a run that
        ended meanwhile is not added back)."""
        ttl_ms = max(1, round(self._lease_seconds * 1000))
        lapses = time.time() + self._lease_seconds
        async with self._redis.pipeline(transaction=False) as pipe:
            for owner, run_id in self._live_runs():
                pipe.zadd(RUNS_KEY.format(owner), {run_id: lapses}, xx=True)
                pipe.pexpire(RUNS_KEY.format(owner), 2 * ttl_ms)
            await pipe.execute()
