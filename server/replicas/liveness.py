"""Which replicas are alive, and closing the runs of those that died.

Each replica keeps a key ``hermes:instance:<name>`` alive with a TTL (its lease, renewed three
times per lease, with the reservations of its live runs). Every replica also looks, once per
lease, for instances that have runs marked live (or conversation locks) in the database but no
key: that replica died (killed, its machine gone). One replica (a Redis ``SET NX`` decides
which) then closes its runs as crash recovery does at start: ``interrupted``, transcripts
closed, session locks released (even those of runs killed before their rows were written).

A name is one process's: a replica starting finds its name's key held (``claim``), and watches
it. A process that died leaves it to lapse (waited out, at most a lease); one renewing it is
alive, and the replica refuses to start (``InstanceTaken``) rather than share the name, and so
the runs, of a live replica.

A replica that was only frozen (stopped, paused) may wake after that. Its key holds an epoch
drawn at each start, and each renewal reads what it replaces: a key that had lapsed (or was
another start's) means its runs were taken over, so it stops them (``Lapsed``) instead of going
on. A replica cut from Redis stops them as soon as it has failed to renew for a lease. Their
writes are fenced in the database besides (a run no longer live is not written over).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
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
Lapsed = Callable[[], None]
"""This replica's lease ran out while it was away: its runs were taken over; stop them."""


class InstanceTaken(Exception):
    """Another live process holds this replica's name (its lease is renewed)."""


class Liveness:
    """This replica's lease, and the watch for replicas whose lease ran out."""

    def __init__(self, redis: aioredis.Redis, *, instance: str, lease_seconds: float) -> None:
        self._redis = redis
        self.instance = instance
        self.lease_seconds = lease_seconds
        self.epoch = uuid.uuid4().hex
        """This start's mark in the key: a renewal that does not find it lost the lease."""
        self._held = False
        self._losses = 0
        """How many times this replica found its lease lost (or gave it up, cut off)."""
        self._renewed_at: float | None = None
        """When the last renewal that held was sent (monotonic): the lease runs a lease from
        no earlier than then."""

    def lease_losses(self) -> int:
        """How many times this replica lost its lease, a count that only grows while the
        lease is renewed: only while it grew may another replica have taken a run of this one
        over. A lease not renewed for two renewals' time counts as lost already: a replica
        that wakes from a freeze may end a run before its renewal finds out."""
        overdue = (
            self._renewed_at is not None
            and time.monotonic() - self._renewed_at > self.lease_seconds * 2 / 3
        )
        return self._losses + overdue

    async def claim(self) -> None:
        """Take this replica's lease at its start. A lease found under its name is either a
        previous life's, which died (it lapses unrenewed: waited out, at most a lease), or a
        live process's (renewed meanwhile): then raise :class:`InstanceTaken`."""
        key = INSTANCE_KEY.format(self.instance)
        ttl = max(1, round(self.lease_seconds * 1000))
        seen: tuple[object, int] | None = None
        """The holder's epoch and its lease's milliseconds left, at the last look."""
        sent = time.monotonic()
        while not await self._redis.set(key, self.epoch, px=ttl, nx=True):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.get(key)
                pipe.pttl(key)
                holder, left = await pipe.execute()
            if holder is None:  # lapsed (or given back) meanwhile: take it
                continue
            if left < 0 or (seen is not None and (holder != seen[0] or left > seen[1])):
                raise InstanceTaken(
                    f"another live replica is running under this one's name ({self.instance}): "
                    "give each replica a name of its own (server.instance, HERMES_INSTANCE) "
                    "or a data directory of its own (server.data_dir, HERMES_DATA_DIR)"
                )
            seen = (holder, int(left))
            await asyncio.sleep(min(max(self.lease_seconds / 20, 0.02), left / 1000))
            sent = time.monotonic()
        self._held, self._renewed_at = True, sent

    async def renew(self, also: Renew, lapsed: Lapsed | None = None) -> None:
        """Take (or keep) this replica's lease for another lease; then ``also``. When the
        lease had been held and is found gone (or another start's), call ``lapsed`` first."""
        ttl = max(1, round(self.lease_seconds * 1000))
        key = INSTANCE_KEY.format(self.instance)
        sent = time.monotonic()
        before = await self._redis.set(key, self.epoch, px=ttl, get=True)
        if self._held and _text(before) != self.epoch:
            self._losses += 1
            log.error(
                "this replica's lease lapsed (frozen or cut from Redis): its runs were taken "
                "over by another replica; stopping them"
            )
            if lapsed is not None:
                lapsed()
        self._held, self._renewed_at = True, sent
        await also()

    async def keep_lease(self, also: Renew, lapsed: Lapsed | None = None) -> None:
        """Renew the lease three times per lease, for good. Cut from Redis for longer than a
        lease, the replica must assume the others declared it dead: it stops its runs then,
        without waiting for Redis to come back and say so."""
        renewed = time.monotonic()
        cut_off = False
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.renew(also, None if cut_off else lapsed)
            except Exception as error:  # Redis away for a moment: try again next beat
                log.warning("renewing this replica's lease failed: %s", type(error).__name__)
                if not cut_off and time.monotonic() - renewed > self.lease_seconds:
                    cut_off = True
                    self._losses += 1
                    log.error(
                        "this replica could not renew its lease for longer than a lease: "
                        "other replicas may have taken its runs over; stopping them"
                    )
                    if lapsed is not None:
                        lapsed()
            else:
                renewed, cut_off = time.monotonic(), False

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
            try:
                closed = await recover(instance)
            finally:
                # The key only keeps two replicas from recovering one at once. Left to its
                # 60 s, it would hold off the recovery of the same replica dying again (it
                # restarted under its name) for the rest of the minute.
                await self._redis.delete(key)
            log.warning(
                "replica %s is gone (no lease): marked its %d live run(s) interrupted",
                instance,
                closed,
            )


def _text(value: object) -> str | None:
    """What ``SET ... GET`` found (bytes from a client that does not decode)."""
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, str) else None


async def refusal_at_start(
    redis_url: str, instances: Sequence[str], *, lease_seconds: float
) -> str | None:
    """Why this replica (or these workers) must not start: another live process runs under one
    of ``instances``, or None. Checked by ``serve`` before anything else, so that the refusal
    is one line, not a failed start-up (nor, with ``--workers``, a worker started again and
    again). The names are looked at together (a dead namesake's lease is waited out once); the
    leases taken for the check are given back at once."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        checks = [
            Liveness(client, instance=name, lease_seconds=lease_seconds) for name in instances
        ]
        claimed = await asyncio.gather(*(check.claim() for check in checks), return_exceptions=True)
        for check, outcome in zip(checks, claimed, strict=True):
            if outcome is None:
                await check.give_back()
        for outcome in claimed:
            if isinstance(outcome, InstanceTaken):
                return str(outcome)
        for outcome in claimed:
            if isinstance(outcome, BaseException):
                raise outcome
    finally:
        await client.aclose()
    return None
