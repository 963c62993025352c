"""Replicas share one volume for uploads and workspaces, and a replica that does not see it says
so: it refuses to start when its volume is not the others', and its /ready turns 503 when the
volume goes away or is swapped while it runs. Against a real Redis."""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from server.replicas.id_file import kept_id
from server.replicas.shared_volume import (
    KEY,
    MARK,
    SharedVolume,
    VolumeNotShared,
    deployment_of,
)
from tests.redis_server import redis_url_or_skip


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url_or_skip())
    yield client
    await client.aclose()


@pytest.fixture
def key() -> str:
    """A deployment of its own per test: tests share one Redis."""
    return uuid.uuid4().hex


async def test_replicas_on_one_volume_agree_on_its_id(
    redis: aioredis.Redis, key: str, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    a = SharedVolume(redis, shared, lease_seconds=10, deployment=key)
    b = SharedVolume(redis, shared, lease_seconds=10, deployment=key)
    await asyncio.gather(a.claim(), b.claim())
    assert a.id == b.id
    assert (shared / MARK).read_text().strip() == a.id
    assert await a.problem() is None


async def test_a_replica_with_its_own_volume_refuses_to_start(
    redis: aioredis.Redis, key: str, tmp_path: Path
) -> None:
    await SharedVolume(redis, tmp_path / "shared", lease_seconds=10, deployment=key).claim()
    own = SharedVolume(redis, tmp_path / "own-disk", lease_seconds=10, deployment=key)
    with pytest.raises(VolumeNotShared, match="not the volume the other replicas use"):
        await own.claim()


async def test_ready_says_when_the_volume_goes_away_or_is_swapped(
    redis: aioredis.Redis, key: str, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    volume = SharedVolume(redis, shared, lease_seconds=10, deployment=key)
    await volume.claim()
    (shared / MARK).unlink()
    assert "cannot be read" in (await volume.problem() or "")
    (shared / MARK).write_text("vol_someoneelse\n")
    assert "was replaced" in (await volume.problem() or "")


async def test_a_new_volume_is_taken_once_the_last_replica_on_the_old_one_is_gone(
    redis: aioredis.Redis, key: str, tmp_path: Path
) -> None:
    old = SharedVolume(redis, tmp_path / "old", lease_seconds=0.05, deployment=key)
    await old.claim()
    new = SharedVolume(redis, tmp_path / "new", lease_seconds=0.05, deployment=key)
    for _ in range(200):  # the old replicas stopped renewing: their id lapses (2 leases)
        try:
            await new.claim()
            break
        except VolumeNotShared:
            await asyncio.sleep(0.02)
    assert new.id != old.id
    assert await new.problem() is None


async def test_renewing_keeps_the_id_from_lapsing(
    redis: aioredis.Redis, key: str, tmp_path: Path
) -> None:
    live = SharedVolume(redis, tmp_path / "shared", lease_seconds=10, deployment=key)
    await live.claim()
    await redis.pexpire(KEY.format(key), 50)  # about to lapse
    await live.renew()
    assert await redis.pttl(KEY.format(key)) > 10_000
    other = SharedVolume(redis, tmp_path / "other", lease_seconds=10, deployment=key)
    with pytest.raises(VolumeNotShared):
        await other.claim()


def test_a_deployment_is_its_database_whatever_credentials_a_replica_uses() -> None:
    one = deployment_of("postgresql+asyncpg://a:pw1@db.internal:5432/hermes")
    assert deployment_of("postgresql+asyncpg://b:pw2@db.internal:5432/hermes") == one
    assert deployment_of("postgresql+asyncpg://a:pw1@db.internal:5432/other") != one


def test_processes_making_the_id_at_once_all_read_the_one_written(tmp_path: Path) -> None:
    """Of many first starts at the same instant, every one reads the id one of them wrote,
    never an empty file another is still writing (a race that lost ~1 round in 7 before)."""
    for round_ in range(20):
        directory = tmp_path / str(round_)
        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            ids = set(pool.map(kept_id, [directory / "id"] * 64, ["vol"] * 64))
        assert len(ids) == 1
        assert (directory / "id").read_text().strip() in ids
        assert [p.name for p in directory.iterdir()] == ["id"]  # no draft left behind
