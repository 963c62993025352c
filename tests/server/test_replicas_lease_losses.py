"""How many times a replica lost its lease, as its webhooks read it to know whether a run may
have been taken over: a lapse found at renewal counts, and so does a lease left unrenewed for
long enough to have lapsed (a replica woken from a freeze may end a run before it renews)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from server.replicas.liveness import INSTANCE_KEY, Liveness
from tests.redis_server import redis_url_or_skip


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url_or_skip())
    yield client
    await client.aclose()


async def _nothing_else() -> None:
    return None


async def test_a_lease_found_lapsed_at_renewal_counts_as_lost(redis: aioredis.Redis) -> None:
    liveness = Liveness(redis, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=60)
    await liveness.claim()
    await liveness.renew(_nothing_else)
    assert liveness.lease_losses() == 0
    await redis.delete(INSTANCE_KEY.format(liveness.instance))  # lapsed while it was frozen
    await liveness.renew(_nothing_else)
    assert liveness.lease_losses() == 1


async def _eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    """Whether ``check`` holds within 30 s, asked every 20 ms."""
    deadline = time.monotonic() + 30
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_a_lease_left_unrenewed_counts_as_lost_before_its_renewal_finds_out(
    redis: aioredis.Redis,
) -> None:
    liveness = Liveness(redis, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=0.3)
    await liveness.claim()
    assert liveness.lease_losses() == 0

    async def counted_lost() -> bool:  # nothing renews it meanwhile: a frozen replica's lease
        return liveness.lease_losses() == 1

    async def lapsed() -> bool:
        return not await redis.exists(INSTANCE_KEY.format(liveness.instance))

    assert await _eventually(counted_lost)
    assert await _eventually(lapsed)
    await liveness.renew(_nothing_else)  # it wakes: its renewal finds the lease lapsed
    assert liveness.lease_losses() == 1
