"""What replicas of one deployment share through Redis: who is alive, and stop requests.

Several ``serve`` processes on one database each run their own runs. Two things must cross
processes quickly, and Redis carries them (``server.redis_url``; without it a single process
needs neither):

- **Stop requests.** A stop, cancel or delete may reach any replica. The one receiving it, not
  running the run itself, publishes the run's id on ``hermes:stop``; every replica listens and
  the one running it stops it, exactly as a local stop would.
- **Per-key run limits.** A run is reserved in ``hermes:runs:<owner>`` before it starts (one
  Lua script checks the count and adds, so replicas admitting at once cannot both pass), its
  replica renews it with its lease, and it is released when the run ends.
- **Provider cooldowns.** A replica that puts a provider on cooldown (a 429 with Retry-After)
  or sees it answer again says so on ``hermes:cooldown``; the others apply it, so that they do
  not each spend a call to learn what one already knows.
- **Event logs.** Each replica writes its runs' events to a Redis stream per run (batched, off
  the runs' path), so that a stream can be resumed on any replica, live or after the run
  ended, for an hour; a dead replica's runs get an ``interrupted`` ending in their logs.
- **Liveness.** Each replica keeps a key ``hermes:instance:<name>`` alive with a TTL (its lease,
  renewed three times per lease). Every replica also looks, once per lease, for instances
  that have runs marked live in the database but no key: that replica died (killed, its machine
  gone). One replica (a Redis ``SET NX`` decides which) then closes its runs as crash recovery
  does at start: ``interrupted``, transcripts closed, session locks released.

Session turns are serialised by the database's session lock, shared by all replicas already.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hermes_core.events import AgentEvent, ExitReason, InterruptSource, RunFinished
from hermes_core.providers.retry import Cooldowns
from hermes_core.usage import Usage
from server.runs.event_codec import encode, from_json

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("hermes.cluster")

STOP_CHANNEL = "hermes:stop"
COOLDOWN_CHANNEL = "hermes:cooldown"
INSTANCE_KEY = "hermes:instance:{}"
RECOVERY_KEY = "hermes:recovering:{}"
EVENTS_KEY = "hermes:events:{}"
"""A run's events, as a Redis stream whose entry ids are ``0-<seq + 1>``: another replica
replays them (a resumed stream) while the run is live and for ``EVENTS_KEPT_SECONDS`` after."""
EVENTS_KEPT_SECONDS = 3600
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

StopHandler = Callable[[str, str, str], None]
"""``(run_id, owner, source)``: stop that run if this replica runs it."""
Recover = Callable[[str], Awaitable[int]]
"""Close the runs a dead instance left live; returns how many."""
LiveInstances = Callable[[], Awaitable[set[str]]]
LiveRuns = Callable[[], list[tuple[str, str]]]
"""``(owner, run_id)`` of this replica's runs in progress."""


class Cluster:
    """This replica's link to the others."""

    def __init__(self, url: str, *, instance: str, lease_seconds: float) -> None:
        self.instance = instance
        self.lease_seconds = lease_seconds
        import redis.asyncio as aioredis  # only replicas pay for importing it

        self._redis: aioredis.Redis = aioredis.from_url(url)
        self._reserve = self._redis.register_script(_RESERVE)
        self._tasks: list[asyncio.Task[None]] = []
        self._live_runs: LiveRuns = list
        self._cooldowns = Cooldowns()
        self._publishing: set[asyncio.Task[None]] = set()
        self._outbox: list[tuple[str, int, bytes]] = []
        self._outbox_filled = asyncio.Event()

    async def start(
        self,
        *,
        on_stop: StopHandler,
        recover: Recover,
        live_instances: LiveInstances,
        live_runs: LiveRuns,
        cooldowns: Cooldowns,
    ) -> None:
        """Take the lease (before serving a run), then keep it, listen, and watch."""
        self._live_runs = live_runs
        self._cooldowns = cooldowns
        cooldowns.listeners.append(self._cooled_here)
        await self._renew()
        pubsub = self._redis.pubsub()
        await pubsub.subscribe(STOP_CHANNEL, COOLDOWN_CHANNEL)
        self._tasks = [
            asyncio.create_task(self._keep_lease(), name="hermes-lease"),
            asyncio.create_task(self._listen(pubsub, on_stop), name="hermes-listener"),
            asyncio.create_task(self._watch(recover, live_instances), name="hermes-watch"),
            asyncio.create_task(self._send_events(), name="hermes-event-log"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            # A clean exit gives its lease back: nobody has runs of it to recover.
            await self._redis.delete(INSTANCE_KEY.format(self.instance))
        await self._redis.aclose()

    async def request_stop(self, run_id: str, owner: str, source: str) -> None:
        message = json.dumps({"run_id": run_id, "owner": owner, "source": source})
        await self._publish(STOP_CHANNEL, message)

    async def _publish(self, channel: str, message: str) -> None:
        await self._redis.publish(channel, message)

    async def reserve(self, owner: str, run_id: str, limit: int) -> bool:
        """Count ``run_id`` among ``owner``'s live runs on all replicas, unless ``limit`` are
        live already (then False). The reservation lapses after a lease unless renewed: a
        replica that dies takes its reservations with it."""
        now = time.time()
        lease_ms = round(self.lease_seconds * 1000)
        reserved = await self._reserve(
            keys=[RUNS_KEY.format(owner)],
            args=[now, now + self.lease_seconds, limit, run_id, 2 * lease_ms],
        )
        return bool(reserved)

    async def release(self, owner: str, run_id: str) -> None:
        await self._redis.zrem(RUNS_KEY.format(owner), run_id)

    # --- the event log ------------------------------------------------------------------------

    def record(self, event: AgentEvent) -> None:
        """Queue ``event`` for the run's log in Redis (sent in batches, off the run's path)."""
        self._outbox.append((event.run_id, event.seq, encode(event)))
        self._outbox_filled.set()

    async def _send_events(self) -> None:
        while True:
            await self._outbox_filled.wait()
            self._outbox_filled.clear()
            batch, self._outbox = self._outbox, []
            # One stream entry per run per batch (its id: the batch's last seq + 1): a command
            # per event would cost the process more than the events themselves.
            by_run: dict[str, list[tuple[int, bytes]]] = {}
            for run_id, seq, text in batch:
                by_run.setdefault(run_id, []).append((seq, text))
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for run_id, logged in by_run.items():
                        key = EVENTS_KEY.format(run_id)
                        entry = b"[" + b",".join(text for _, text in logged) + b"]"
                        pipe.xadd(key, {"e": entry}, id=f"0-{logged[-1][0] + 1}")
                        pipe.expire(key, EVENTS_KEPT_SECONDS)
                    await pipe.execute(raise_on_error=False)
            except Exception as error:  # Redis away: these events are missing from the log
                log.warning("event log: %d event(s) not sent: %s", len(batch), error)

    async def has_events(self, run_id: str) -> bool:
        return bool(await self._redis.exists(EVENTS_KEY.format(run_id)))

    async def events(self, run_id: str, *, after: int = -1) -> AsyncIterator[AgentEvent]:
        """The run's logged events with ``seq > after``, then new ones as they are logged,
        until its ``run_finished``."""
        key = EVENTS_KEY.format(run_id)
        last = f"0-{after + 1}"
        while True:
            found: Any = await self._redis.xread({key: last}, block=1000, count=100)
            for _stream, entries in found:
                for entry_id, fields in entries:
                    last = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                    for event in _entry(fields):
                        if event.seq <= after:
                            continue
                        yield event
                        if isinstance(event, RunFinished):
                            return

    async def close_log(self, run_id: str, error: str) -> None:
        """End the log of a run whose replica died mid-run with an honest ``run_finished``
        (interrupted), so that streams resumed on other replicas end too."""
        key = EVENTS_KEY.format(run_id)
        newest: Any = await self._redis.xrevrange(key, count=1)
        if not newest:
            return
        logged = _entry(newest[0][1])
        if not logged or isinstance(logged[-1], RunFinished):
            return
        seq = logged[-1].seq + 1
        finish = RunFinished(
            run_id=run_id,
            seq=seq,
            exit_reason=ExitReason.INTERRUPTED,
            final_text="",
            partial=True,
            iterations=0,
            usage=Usage(),
            model_calls=0,
            error=error,
            interrupt_source=InterruptSource.SHUTDOWN,
        )
        await self._redis.xadd(key, {"e": b"[" + encode(finish) + b"]"}, id=f"0-{seq + 1}")
        await self._redis.expire(key, EVENTS_KEPT_SECONDS)

    async def alive(self, instance: str) -> bool:
        return bool(await self._redis.exists(INSTANCE_KEY.format(instance)))

    # --- the background work ----------------------------------------------------------------

    async def _renew(self) -> None:
        ttl = max(1, round(self.lease_seconds * 1000))
        await self._redis.set(INSTANCE_KEY.format(self.instance), "1", px=ttl)
        lapses = time.time() + self.lease_seconds
        async with self._redis.pipeline(transaction=False) as pipe:
            for owner, run_id in self._live_runs():
                pipe.zadd(RUNS_KEY.format(owner), {run_id: lapses}, xx=True)
                pipe.pexpire(RUNS_KEY.format(owner), 2 * ttl)
            await pipe.execute()

    async def _keep_lease(self) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self._renew()
            except Exception as error:  # Redis away for a moment: try again next beat
                log.warning("renewing this replica's lease failed: %s", type(error).__name__)

    async def _listen(self, pubsub: Any, on_stop: StopHandler) -> None:
        while True:
            try:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            except Exception as error:
                log.warning("stop channel: %s; resubscribing", type(error).__name__)
                await asyncio.sleep(1.0)
                with contextlib.suppress(Exception):
                    await pubsub.subscribe(STOP_CHANNEL, COOLDOWN_CHANNEL)
                continue
            if message is None:
                continue
            try:
                request = json.loads(message["data"])
                if message["channel"] in (COOLDOWN_CHANNEL, COOLDOWN_CHANNEL.encode()):
                    self._cooled_elsewhere(request)
                else:
                    on_stop(str(request["run_id"]), str(request["owner"]), str(request["source"]))
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a malformed message on %s", message.get("channel"))

    def _cooled_here(self, provider: str, seconds: float | None) -> None:
        """This replica put a provider on cooldown (or saw it answer): tell the others."""
        message = json.dumps({"provider": provider, "seconds": seconds, "from": self.instance})
        task = asyncio.get_running_loop().create_task(self._publish(COOLDOWN_CHANNEL, message))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    def _cooled_elsewhere(self, message: dict[str, Any]) -> None:
        if message["from"] == self.instance:
            return
        seconds = message["seconds"]
        provider = str(message["provider"])
        self._cooldowns.apply(provider, float(seconds) if seconds is not None else None)

    async def _watch(self, recover: Recover, live_instances: LiveInstances) -> None:
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


def _entry(fields: Any) -> list[AgentEvent]:
    """The events of one log entry (a JSON array of them)."""
    return [from_json(item) for item in json.loads(fields[b"e"])]
