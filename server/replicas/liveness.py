"""Which replicas are alive, and closing the runs of those that died.

Each replica keeps a key ``hermes:instance:<name>`` alive with a TTL (its lease, renewed three
times per lease, with the reservations of its live runs). Every replica also looks, once per
lease, for instances that have runs marked live in the database but no key: that replica died
(killed, its machine gone). One replica (a Redis ``SET NX`` decides which) then closes its runs
as crash recovery does at start: ``interrupted``, transcripts closed, session locks released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("hermes.cluster")

INSTANCE_KEY = "hermes:instance:{}"
RECOVERY_KEY = "hermes:recovering:{}"

Recover = Callable[[str], Awaitable[int]]
"""Close the runs a dead instance left live; returns how many."""
LiveInstances = Callable[[], Awaitable[set[str]]]
Renew = Callable[[], Awaitable[None]]
"""What else this replica keeps alive with its lease (its runs' reservations)."""


class Liveness:
    """This replica's lease, and the watch for replicas whose lease ran out."""

    def __init__(self, redis: aioredis.Redis, *, instance: str, lease_seconds: float) -> None:
        self._redis = redis
        self.instance = instance
        self.lease_seconds = lease_seconds

    async def renew(self, also: Renew) -> None:
        """Take (or keep) this replica's lease for another lease; then ``also``."""
        ttl = max(1, round(self.lease_seconds * 1000))
        await self._redis.set(INSTANCE_KEY.format(self.instance), "1", px=ttl)
        await also()

    async def keep_lease(self, also: Renew) -> None:
        """Renew the lease three times per lease, for good."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.renew(also)
            except Exception as error:  # Redis away for a moment: try again next beat
                log.warning("renewing this replica's lease failed: %s", type(error).__name__)

    async def give_back(self) -> None:
        """A clean exit gives its lease back: nobody has runs of it to recover."""
        with contextlib.suppress(Exception):
            await self._redis.delete(INSTANCE_KEY.format(self.instance))

    async def alive(self, instance: str) -> bool:
        return bool(await self._redis.exists(INSTANCE_KEY.format(instance)))

    async def watch(self, recover: Recover, live_instances: LiveInstances) -> None:
        """Once per lease, recover the replicas that have live runs but no lease, for good."""
        while True:
            await asyncio.sleep(self.lease_seconds)
            try:
                await self._recover_dead(recover, live_instances)
            except Exception:  # the next look will do
                log.exception("looking for dead replicas failed")

    async def _recover_dead(self, recover: Recover, live_instances: LiveInstances) -> None:
        for instance in await live_instances():
            if instance == self.instance or await self.alive(instance):
                continue
            # One replica recovers a dead one: the first to take this key.
            key = RECOVERY_KEY.format(instance)
            if not await self._redis.set(key, self.instance, nx=True, ex=60):
                continue
            closed = await recover(instance)
            log.warning(
                "replica %s is gone (no lease): marked its %d live run(s) interrupted",
                instance,
                closed,
            )
