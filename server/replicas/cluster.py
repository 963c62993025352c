"""This replica's link to the others: one Redis client, and the parts that share it.

Several ``serve`` processes on one database each run their own runs. What must cross
processes quickly, Redis carries (``server.redis_url``; without it a single process needs
none of it), each part in a module of its own:

- ``broadcasts``: stop requests, steers and provider cooldowns, published to every replica;
- ``reservations``: per-key run limits counted across replicas;
- ``event_log``: each run's events, replayable from any replica;
- ``liveness``: each replica's lease, and the recovery of the runs of one that died;
- ``run_writes``: what runs write (reservations, log entries, releases), one command a flush.

Session turns are serialised by the database's session lock, shared by all replicas already.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_core.events import AgentEvent
from hermes_core.providers.retry import Cooldowns
from server.replicas.broadcasts import Broadcasts, ForgetHandler, SteerHandler, StopHandler
from server.replicas.event_log import EventLog
from server.replicas.liveness import InstanceTaken, Lapsed, LiveInstances, Liveness, Recover
from server.replicas.reservations import LiveRuns, Refusal, Reservations
from server.replicas.run_writes import RunWrites
from server.replicas.shared_volume import SharedVolume

if TYPE_CHECKING:
    import redis.asyncio as aioredis


class Cluster:
    """This replica's link to the others."""

    def __init__(
        self,
        url: str,
        *,
        instance: str,
        lease_seconds: float,
        shared_dir: Path | None = None,
        deployment: str = "",
    ) -> None:
        self.instance = instance
        self.lease_seconds = lease_seconds
        import redis.asyncio as aioredis  # only replicas pay for importing it

        self._redis: aioredis.Redis = aioredis.from_url(url)
        self._liveness = Liveness(self._redis, instance=instance, lease_seconds=lease_seconds)
        self._broadcasts = Broadcasts(self._redis, instance=instance)
        self._writes = RunWrites(self._redis, lease_seconds=lease_seconds)
        self._reservations = Reservations(self._redis, self._writes, lease_seconds=lease_seconds)
        self._log = EventLog(self._redis, self._writes)
        self.volume = (
            SharedVolume(
                self._redis, shared_dir, lease_seconds=lease_seconds, deployment=deployment
            )
            if shared_dir is not None
            else None
        )
        """The volume of uploads and workspaces every replica must see (None: not checked)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._claimed = False
        self.taken: InstanceTaken | None = None
        """Why :meth:`claim` refused this replica its name (a live process holds it): ``serve``
        then exits as refused (2), so a ``--workers`` parent stops rather than start it again."""

    async def claim(self) -> None:
        """Check the shared volume and take this replica's lease, before it recovers its
        previous life's runs (a live namesake's are not its own) or serves one. Raises
        :class:`VolumeNotShared` when this replica's volume is not the others', and
        :class:`InstanceTaken` when another live replica runs under its name."""
        if self._claimed:
            return
        if self.volume is not None:
            await self.volume.claim()
        try:
            await self._liveness.claim()
        except InstanceTaken as taken:
            self.taken = taken
            raise
        self._claimed = True

    async def start(
        self,
        *,
        on_stop: StopHandler,
        recover: Recover,
        live_instances: LiveInstances,
        live_runs: LiveRuns,
        cooldowns: Cooldowns,
        lapsed: Lapsed | None = None,
        on_steer: SteerHandler | None = None,
        on_forget: ForgetHandler | None = None,
    ) -> None:
        """:meth:`claim` (when not done yet), then keep the lease (``lapsed`` when it was lost
        meanwhile: this replica's runs were taken over), listen, and watch."""
        await self.claim()
        self._reservations.track(live_runs)
        await self._liveness.renew(self._renew)
        pubsub = await self._broadcasts.subscribe(cooldowns)
        renew = self._renew
        self._tasks = [
            asyncio.create_task(self._liveness.keep_lease(renew, lapsed), name="hermes-lease"),
            asyncio.create_task(
                self._broadcasts.listen(
                    pubsub,
                    on_stop,
                    on_steer,
                    on_forget,
                    lambda: (run_id for _, run_id in live_runs()),
                ),
                name="hermes-listener",
            ),
            asyncio.create_task(self._liveness.watch(recover, live_instances), name="hermes-watch"),
            asyncio.create_task(self._writes.send_forever(), name="hermes-run-writes"),
        ]

    async def _renew(self) -> None:
        """What each lease renewal carries along: the runs' reservations, the volume's id."""
        await self._reservations.renew()
        if self.volume is not None:
            await self.volume.renew()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._writes.close()
        await self._liveness.give_back()
        await self._redis.aclose()

    async def request_stop(self, run_id: str, owner: str, source: str) -> None:
        await self._broadcasts.request_stop(run_id, owner, source)

    async def request_steer(self, run_id: str, owner: str, text: str) -> bool | None:
        """Steer the run on the replica running it: whether it took ``text`` (None: no
        replica runs it)."""
        return await self._broadcasts.request_steer(run_id, owner, text)

    async def reserve(self, owner: str, run_id: str, limit: int, alias: str = "") -> bool:
        """Count ``run_id`` among ``owner``'s live runs on all replicas, unless ``limit`` are
        live already (then False); ``alias``: its other id (completion, Response)."""
        return await self._reservations.reserve(owner, run_id, limit, alias)

    async def reserve_for_user(
        self,
        owner: str,
        end_user: str,
        run_id: str,
        *,
        limit: int,
        user_limit: int,
        alias: str = "",
    ) -> Refusal | None:
        """Count ``run_id`` among ``owner``'s and its ``end_user``'s live runs on all
        replicas, unless ``limit`` or ``user_limit`` are live already: None when reserved,
        else whose limit refused it."""
        return await self._reservations.reserve_for_user(
            owner, end_user, run_id, limit=limit, user_limit=user_limit, alias=alias
        )

    async def reserved_run(self, owner: str, run_id: str) -> str | None:
        """The run id of ``owner``'s live run ``run_id`` (or alias) on any replica, from its
        reservation: found before its row is in the database."""
        return await self._reservations.find(owner, run_id)

    async def release(self, owner: str, run_id: str, end_user: str | None = None) -> None:
        """Let go of the run's reservation (and its end user's), with the next flush."""
        self._reservations.release(owner, run_id, end_user)

    def record(self, event: AgentEvent) -> None:
        """Queue ``event`` for the run's log (sent in batches, off the run's path)."""
        self._log.record(event)

    async def has_events(self, run_id: str) -> bool:
        return await self._log.has_events(run_id)

    def events(self, run_id: str, *, after: int = -1) -> AsyncIterator[AgentEvent]:
        """The run's logged events with ``seq > after``, then new ones as they are logged,
        until its ``run_finished``."""
        return self._log.events(run_id, after=after)

    async def forget_runs(self, run_ids: list[str]) -> None:
        """Erased runs: drop their event logs, and have every replica drop the events it
        holds of them in memory."""
        await self._log.drop(run_ids)
        await self._broadcasts.request_forget(run_ids)

    async def close_log(self, run_id: str, error: str) -> None:
        """End the log of a run whose replica died mid-run with an ``interrupted`` ending."""
        await self._log.close_log(run_id, error)

    def lease_losses(self) -> int:
        """How many times this replica lost its lease so far: a run of its can have been
        taken over by another replica only if the count grew while it ran."""
        return self._liveness.lease_losses()

    async def alive(self, instance: str) -> bool:
        return await self._liveness.alive(instance)
