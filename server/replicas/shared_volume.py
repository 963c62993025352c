"""The volume the replicas share, and a replica that does not see it.

Uploaded files (``files/``) and conversations' workspaces (``workspaces/``) live under
``server.shared_dir``, one volume every replica mounts (a network filesystem; in Kubernetes a
ReadWriteMany volume), so that any replica serves any conversation. A replica that mounted
another volume, or none (its own disk in its place), would answer a file uploaded through
another replica with a 404 and lose between two turns what the agent wrote. Nothing would say
so; hence a mark:

- the volume holds a random id (``.hermes-volume``, written once, by the first replica);
- Redis holds the id of the volume the live replicas of the deployment (its database) use, for
  as long as one of them renews it (it lapses with the last one, so a deployment can move to a
  new volume by a full restart);
- a replica compares the two at start, and refuses to start when they differ, and again for
  each ``/ready``, which turns 503 when the volume went away or was swapped under it.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from server.replicas.id_file import kept_id

if TYPE_CHECKING:
    import redis.asyncio as aioredis

MARK = ".hermes-volume"
KEY = "hermes:shared-volume:{}"
"""Per deployment (its database): several deployments may share one Redis."""


def deployment_of(database_url: str) -> str:
    """A deployment's name in Redis: its database's address (host, port, name), hashed; the
    same for every replica of it, whatever credentials each uses."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    where = f"{url.get_backend_name()}://{url.host or ''}:{url.port or ''}/{url.database or ''}"
    return hashlib.sha256(where.encode()).hexdigest()[:16]


class VolumeNotShared(Exception):
    """This replica's shared directory is not the volume the other replicas use."""


def volume_id(directory: Path) -> str:
    """The id the volume at ``directory`` holds, written (once, atomically) if it has none."""
    return kept_id(directory / MARK, "vol")


def _mark_of(directory: Path) -> str | None:
    """The id the volume holds now; None if it cannot be read (unmounted, gone)."""
    try:
        return (directory / MARK).read_text().strip() or None
    except OSError:
        return None


class SharedVolume:
    """One replica's check that it sees the volume the others use."""

    def __init__(
        self, redis: aioredis.Redis, directory: Path, *, lease_seconds: float, deployment: str
    ) -> None:
        self._redis = redis
        self._key = KEY.format(deployment)
        self.directory = directory
        self._ttl_ms = int(lease_seconds * 2 * 1000)
        self.id = ""

    async def claim(self) -> None:
        """Read (or write) the volume's id and compare it with the live replicas'; raise
        :class:`VolumeNotShared` when they differ."""
        self.id = await asyncio.to_thread(volume_id, self.directory)
        await self._redis.set(self._key, self.id, nx=True, px=self._ttl_ms)
        await self._compare()

    async def renew(self) -> None:
        """Keep the live replicas' id from lapsing (with each lease renewal)."""
        await self._redis.set(self._key, self.id, nx=True, px=self._ttl_ms)
        await self._redis.pexpire(self._key, self._ttl_ms)

    async def problem(self) -> str | None:
        """What is wrong with the volume now, for ``/ready``; None when all is well."""
        mark = await asyncio.to_thread(_mark_of, self.directory)
        if mark is None:
            return f"The shared volume at {self.directory} cannot be read."
        if mark != self.id:
            return f"The volume at {self.directory} was replaced while this server ran."
        try:
            await self._compare()
        except VolumeNotShared as refused:
            return str(refused)
        return None

    async def _compare(self) -> None:
        recorded = await self._redis.get(self._key)
        theirs = recorded.decode() if isinstance(recorded, bytes) else recorded
        if theirs is not None and theirs != self.id:
            raise VolumeNotShared(
                f"server.shared_dir ({self.directory}) is not the volume the other replicas "
                f"use: it holds {self.id}, theirs is {theirs}. Mount the deployment's shared "
                "volume there (see docs/deployment.md)."
            )


async def refusal_at_start(
    redis_url: str, directory: Path, *, lease_seconds: float, deployment: str
) -> str | None:
    """Why this replica must not start (its volume is not the others'), or None: checked by
    ``serve`` before anything else, so that the refusal is one line, not a failed start-up."""
    import redis.asyncio as aioredis

    client = aioredis.from_url(redis_url)
    try:
        volume = SharedVolume(client, directory, lease_seconds=lease_seconds, deployment=deployment)
        await volume.claim()
    except VolumeNotShared as refused:
        return str(refused)
    finally:
        await client.aclose()
    return None
