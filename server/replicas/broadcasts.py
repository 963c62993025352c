"""What one replica tells all the others at once, over Redis pub/sub.

- **Stop requests.** A stop, cancel or delete may reach any replica. The one receiving it, not
  running the run itself, publishes the run's id on ``hermes:stop``; every replica listens and
  the one running it stops it, exactly as a local stop would. A message published while a
  replica is not subscribed (its connection lost, not yet back) never reaches it: so the stop
  is also kept for a minute under ``hermes:stop:<run id>``, and a replica looks up its live
  runs' kept stops each time it is subscribed again.
- **Steering.** A message for a running turn (``Agent.steer``) may reach any replica too. It
  is published on ``hermes:steer`` with a reply key; the replica running the run steers it
  and pushes whether the run took the message onto that key, which the asking replica waits
  on (a few seconds): unlike a stop, a steer's caller must know whether it was taken.
- **Provider cooldowns.** A replica that puts a provider on cooldown (a 429 with Retry-After)
  or sees it answer again says so on ``hermes:cooldown``; the others apply it, so that they do
  not each spend a call to learn what one already knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from hermes_core.providers.retry import Cooldowns

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("hermes.cluster")

STOP_CHANNEL = "hermes:stop"
COOLDOWN_CHANNEL = "hermes:cooldown"
STEER_CHANNEL = "hermes:steer"
FORGET_CHANNEL = "hermes:forget"
"""Runs whose records were erased: every replica drops the events it holds of them."""
KEPT_STOP_KEY = "hermes:stop:{}"
"""A stop of one run, kept for its replica in case it was not listening when it was sent."""
KEPT_STOP_SECONDS = 60
"""Longer than a replica takes to subscribe again (a second) or a Redis restart takes; a
replica cut off for longer than its lease stops all its runs anyway."""
STEER_REPLY_SECONDS = 3.0
"""How long a steer waits for the running replica's word (it answers at once when alive)."""

CHANNELS = (STOP_CHANNEL, COOLDOWN_CHANNEL, STEER_CHANNEL, FORGET_CHANNEL)

StopHandler = Callable[[str, str, str], None]
"""``(run_id, owner, source)``: stop that run if this replica runs it."""

ForgetHandler = Callable[[list[str]], object]
"""``(run_ids)``: drop whatever this replica holds of these runs."""

LiveRunIds = Callable[[], Iterable[str]]
"""The ids of this replica's runs in progress: those a stop kept while it did not listen may
be for."""

SteerHandler = Callable[[str, str, str], bool | None]
"""``(run_id, owner, text)``: steer that run if this replica runs it; whether it took the
message, or None when the run is not this replica's."""


class Broadcasts:
    """This replica's side of the stop and cooldown channels."""

    def __init__(self, redis: aioredis.Redis, *, instance: str) -> None:
        self._redis = redis
        self._instance = instance
        self._cooldowns = Cooldowns()
        self._publishing: set[asyncio.Task[None]] = set()

    async def subscribe(self, cooldowns: Cooldowns) -> Any:
        """Share ``cooldowns`` with the other replicas; the subscription to read with
        :meth:`listen` (subscribed before this replica serves a run)."""
        self._cooldowns = cooldowns
        cooldowns.listeners.append(self._cooled_here)
        pubsub = self._redis.pubsub()
        await pubsub.subscribe(*CHANNELS)
        return pubsub

    async def request_stop(self, run_id: str, owner: str, source: str) -> None:
        """Have the replica running ``run_id`` stop it: kept first, then published, so that a
        replica subscribing again after the publication finds it kept."""
        message = json.dumps({"run_id": run_id, "owner": owner, "source": source})
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(KEPT_STOP_KEY.format(run_id), message, ex=KEPT_STOP_SECONDS)
            pipe.publish(STOP_CHANNEL, message)
            await pipe.execute()

    async def _kept_stops(self, live_runs: LiveRunIds, on_stop: StopHandler) -> None:
        """Subscribed (again): stop the live runs whose stop was sent while this replica did
        not listen."""
        run_ids = sorted(set(live_runs()))
        if not run_ids:
            return
        kept = await self._redis.mget([KEPT_STOP_KEY.format(run_id) for run_id in run_ids])
        for message in kept:
            if message is not None:
                self._stop_requested(json.loads(message), on_stop)

    @staticmethod
    def _stop_requested(request: dict[str, Any], on_stop: StopHandler) -> None:
        on_stop(str(request["run_id"]), str(request["owner"]), str(request["source"]))

    async def request_steer(self, run_id: str, owner: str, text: str) -> bool | None:
        """Steer ``owner``'s run ``run_id`` on the replica running it: whether the run took
        the message, or None when no replica answered (it is no longer running anywhere)."""
        reply = f"hermes:steer:reply:{secrets.token_hex(12)}"
        message = json.dumps({"run_id": run_id, "owner": owner, "text": text, "reply": reply})
        await self._publish(STEER_CHANNEL, message)
        answer = await self._redis.blpop([reply], timeout=STEER_REPLY_SECONDS)
        if answer is None:
            return None
        return bool(answer[1] == b"1")

    async def request_forget(self, run_ids: list[str]) -> None:
        await self._publish(FORGET_CHANNEL, json.dumps({"run_ids": run_ids}))

    async def _publish(self, channel: str, message: str) -> None:
        await self._redis.publish(channel, message)

    async def _reply(self, key: str, taken: bool) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.rpush(key, "1" if taken else "0")
            pipe.expire(key, 60)  # unread (the asker gave up): gone soon
            await pipe.execute()

    def _steer_requested(self, request: dict[str, Any], on_steer: SteerHandler | None) -> None:
        if on_steer is None:
            return
        taken = on_steer(str(request["run_id"]), str(request["owner"]), str(request["text"]))
        if taken is None:  # not ours: the replica running it answers
            return
        task = asyncio.get_running_loop().create_task(self._reply(str(request["reply"]), taken))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    async def listen(
        self,
        pubsub: Any,
        on_stop: StopHandler,
        on_steer: SteerHandler | None = None,
        on_forget: ForgetHandler | None = None,
        live_runs: LiveRunIds = tuple,
    ) -> None:
        """Hand stop requests to ``on_stop``, steers to ``on_steer``, erased runs to
        ``on_forget``, and apply the others' cooldowns, for good. Each time the stop channel is
        subscribed (again, after a lost connection), the stops kept for ``live_runs()`` while
        this replica did not listen are handed to ``on_stop`` too."""
        while True:
            try:
                message = await pubsub.get_message(timeout=1.0)
                if _subscribed_to_stops(message):
                    await self._kept_stops(live_runs, on_stop)
            except Exception as error:
                log.warning("stop channel: %s; resubscribing", type(error).__name__)
                await asyncio.sleep(1.0)
                with contextlib.suppress(Exception):
                    await pubsub.subscribe(*CHANNELS)
                continue
            if message is None or message["type"] != "message":
                continue
            try:
                request = json.loads(message["data"])
                channel = message["channel"]
                if channel in (COOLDOWN_CHANNEL, COOLDOWN_CHANNEL.encode()):
                    self._cooled_elsewhere(request)
                elif channel in (STEER_CHANNEL, STEER_CHANNEL.encode()):
                    self._steer_requested(request, on_steer)
                elif channel in (FORGET_CHANNEL, FORGET_CHANNEL.encode()):
                    if on_forget is not None:
                        on_forget([str(run_id) for run_id in request["run_ids"]])
                else:
                    self._stop_requested(request, on_stop)
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a malformed message on %s", message.get("channel"))

    def _cooled_here(self, provider: str, seconds: float | None) -> None:
        """This replica put a provider on cooldown (or saw it answer): tell the others."""
        message = json.dumps({"provider": provider, "seconds": seconds, "from": self._instance})
        task = asyncio.get_running_loop().create_task(self._publish(COOLDOWN_CHANNEL, message))
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)

    def _cooled_elsewhere(self, message: dict[str, Any]) -> None:
        if message["from"] == self._instance:
            return
        seconds = message["seconds"]
        provider = str(message["provider"])
        self._cooldowns.apply(provider, float(seconds) if seconds is not None else None)


def _subscribed_to_stops(message: dict[str, Any] | None) -> bool:
    """Whether ``message`` says the stop channel is subscribed (at start, or again)."""
    return (
        message is not None
        and message["type"] == "subscribe"
        and message["channel"] in (STOP_CHANNEL, STOP_CHANNEL.encode())
    )
