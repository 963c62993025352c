"""What one replica tells all the others at once, over Redis pub/sub.

- **Stop requests.** A stop, cancel or delete may reach any replica. The one receiving it, not
  running the run itself, publishes the run's id on ``hermes:stop``; every replica listens and
  the one running it stops it, exactly as a local stop would.
- **Provider cooldowns.** A replica that puts a provider on cooldown (a 429 with Retry-After)
  or sees it answer again says so on ``hermes:cooldown``; the others apply it, so that they do
  not each spend a call to learn what one already knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hermes_core.providers.retry import Cooldowns

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("hermes.cluster")

STOP_CHANNEL = "hermes:stop"
COOLDOWN_CHANNEL = "hermes:cooldown"

StopHandler = Callable[[str, str, str], None]
"""``(run_id, owner, source)``: stop that run if this replica runs it."""


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
        await pubsub.subscribe(STOP_CHANNEL, COOLDOWN_CHANNEL)
        return pubsub

    async def request_stop(self, run_id: str, owner: str, source: str) -> None:
        message = json.dumps({"run_id": run_id, "owner": owner, "source": source})
        await self._publish(STOP_CHANNEL, message)

    async def _publish(self, channel: str, message: str) -> None:
        await self._redis.publish(channel, message)

    async def listen(self, pubsub: Any, on_stop: StopHandler) -> None:
        """Hand stop requests to ``on_stop`` and apply the others' cooldowns, for good."""
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
