"""Runs' event logs in Redis, so that any replica can replay any run's events.

Each replica writes its runs' events to a Redis stream per run (off the runs' path, batched
with their other writes by ``run_writes``), so that a stream can be resumed on any replica, live
or after the run ended, for an hour (``/v1/runs/{id}/events``, a resumed Responses stream); a
dead replica's runs get an ``interrupted`` ending in their logs from the replica that recovers
them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from hermes_core.events import AgentEvent, ExitReason, InterruptSource, RunFinished
from hermes_core.json_codec import dumps
from hermes_core.usage import Usage
from server.replicas.run_writes import RunWrites
from server.runs.event_codec import from_json

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("hermes.cluster")

EVENTS_KEY = "hermes:events:{}"
"""A run's events, as a Redis stream whose entry ids are ``0-<seq + 1>``: another replica
replays them (a resumed stream) while the run is live and for ``EVENTS_KEPT_SECONDS`` after."""
EVENTS_KEPT_SECONDS = 3600


class EventLog:
    """The runs' logs: this replica's runs written, any replica's runs read."""

    def __init__(self, redis: aioredis.Redis, writes: RunWrites) -> None:
        self._redis = redis
        self._writes = writes
        self._outbox: dict[str, list[AgentEvent]] = {}
        """Each run's events recorded since the last flush."""
        writes.log_from(self._take, kept_seconds=EVENTS_KEPT_SECONDS)

    def record(self, event: AgentEvent) -> None:
        """Queue ``event`` for the run's log in Redis (sent in batches, off the run's path)."""
        logged = self._outbox.get(event.run_id)
        if logged is None:
            self._outbox[event.run_id] = [event]
            self._writes.wake()
        else:
            logged.append(event)

    def _take(self) -> list[tuple[str, str, bytes]]:
        """What was recorded since the last flush, as entries ``(key, entry id, entry)``: one
        per run, its events as one JSON array as ``event_codec.encode`` writes each (its id: the
        last one's seq + 1). An entry per event would cost the process more than the events."""
        outbox, self._outbox = self._outbox, {}
        return [
            (EVENTS_KEY.format(run_id), f"0-{logged[-1].seq + 1}", dumps(logged))
            for run_id, logged in outbox.items()
        ]

    async def has_events(self, run_id: str) -> bool:
        return bool(await self._redis.exists(EVENTS_KEY.format(run_id)))

    async def events(self, run_id: str, *, after: int = -1) -> AsyncIterator[AgentEvent]:
        """The run's logged events with ``seq > after``, then new ones as they are logged,
        until its ``run_finished``."""
        key = EVENTS_KEY.format(run_id)
        if after >= 0 and await self._ended_by(key, after):
            return  # a reader past the end (an EventSource reconnecting): nothing more comes
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

    async def _ended_by(self, key: str, seq: int) -> bool:
        """Whether the log at ``key`` ended (its ``run_finished`` logged) at or before
        ``seq``: reading after that would wait for ever."""
        newest: Any = await self._redis.xrevrange(key, count=1)
        if not newest:
            return False
        logged = _entry(newest[0][1])
        return bool(logged) and isinstance(logged[-1], RunFinished) and logged[-1].seq <= seq

    async def drop(self, run_ids: list[str]) -> None:
        """Delete these runs' logs (their records were erased)."""
        if run_ids:
            await self._redis.delete(*(EVENTS_KEY.format(run_id) for run_id in run_ids))

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
        from redis.exceptions import ResponseError  # only replicas pay for importing it

        try:
            await self._redis.xadd(key, {"e": dumps([finish])}, id=f"0-{seq + 1}")
        except ResponseError:  # closed meanwhile: a replica restarted under its name, and another
            return
        await self._redis.expire(key, EVENTS_KEPT_SECONDS)


def _entry(fields: Any) -> list[AgentEvent]:
    """The events of one log entry (a JSON array of them)."""
    return [from_json(item) for item in json.loads(fields[b"e"])]
