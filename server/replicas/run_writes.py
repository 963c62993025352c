"""What this replica's runs write to Redis, sent as one command per flush, shared by all runs.

A run writes three things: its reservation (before it starts, with an alias of its other id),
its event log's entries (as it goes) and its release (when it ends). Sent a round trip each,
they cost a one-call run four or five round trips and ~0.3 ms of the server's CPU (redis-py,
here, spends ~100 µs on a round trip and ~25 µs on each command of a pipeline). So every write
waits in one queue here, and one task sends the queue as a single ``EVALSHA`` of the script
below, whatever runs the writes belong to: at concurrency 64, one flush per seven runs or so.

When: a reservation is waited for (a run cannot start before its answer), so it is sent at
once, or with the next flush while one is in flight. Log entries and releases nobody waits
for gather up to ``GATHER_SECONDS`` first, so that a run's last events and its release go in
one flush (its first events too, if it ends that soon).

The script keeps each write's guarantee: a reservation checks the key's count and adds to it
in one step (replicas admitting at once cannot both pass); a run's log entries are appended in
order and its log kept an hour after the last; a release goes with what was queued beside it,
normally the run's last entry. Redis runs a script alone: nobody sees a flush half done.

A reservation lapses by Redis's clock (``TIME``, read in the script), never a replica's: a
replica whose clock ran ahead would otherwise prune the others' reservations before they
lapse (and let a key past its limit), and one behind would write its own lapsed already.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("hermes.cluster")

GATHER_SECONDS = 0.005
"""How long writes nobody waits for wait for company: a replica resuming a run's stream sees
its events up to this much later, far below what a reader notices."""
RETRY_SECONDS = 0.5
"""How soon log entries a flush could not send (Redis away) are sent again."""
UNSENT_KEPT_BYTES = 32 * 1024 * 1024
"""Log entries kept for Redis's return at most (beyond, the oldest go): a replica away from
Redis stops its runs within a lease, so only a lease's worth of entries should ever wait."""

Entries = Callable[[], list[tuple[str, str, bytes]]]
"""The log entries to append now, ``(key, entry id, entry)``, taken from their queue."""

# ARGV[1] how long a reservation made now lasts (s), ARGV[2] a run set's TTL (ms), ARGV[3] a
# log's TTL (s), ARGV[4] how many log entries come first. Then, KEYS[i] the key: an entry's id
# and the entry; or a reservation ('r', the key's limit, the run) or a release ('f', the run)
# or an alias ('a', the run, its TTL in s). It returns a character per reservation, in order:
# 1 made, 0 refused. Reservations are scored by when they lapse, by Redis's clock: TIME (in
# a script since Redis 5, whose scripts replicate their effects) is read once, and only by a
# flush that reserves.
_FLUSH = """
local entries = tonumber(ARGV[4])
local at = 5
for i = 1, entries do
  -- pcall: a log another replica closed (it took this one for dead) refuses older ids
  redis.pcall('XADD', KEYS[i], ARGV[at], 'e', ARGV[at + 1])
  redis.call('EXPIRE', KEYS[i], ARGV[3])
  at = at + 2
end
local now, lapses
local reserved = {}
for i = entries + 1, #KEYS do
  local key = KEYS[i]
  if ARGV[at] == 'r' then
    if not now then
      local time = redis.call('TIME')
      local seconds = tonumber(time[1]) + tonumber(time[2]) / 1000000
      now = string.format('%.6f', seconds)
      lapses = string.format('%.6f', seconds + tonumber(ARGV[1]))
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    if redis.call('ZCARD', key) >= tonumber(ARGV[at + 1]) then
      reserved[#reserved + 1] = '0'
    else
      redis.call('ZADD', key, lapses, ARGV[at + 2])
      redis.call('PEXPIRE', key, ARGV[2])
      reserved[#reserved + 1] = '1'
    end
    at = at + 3
  elseif ARGV[at] == 'a' then
    redis.call('SET', key, ARGV[at + 1], 'EX', ARGV[at + 2])
    at = at + 3
  else
    redis.call('ZREM', key, ARGV[at + 1])
    at = at + 2
  end
end
return table.concat(reserved)
"""


class RunWrites:
    """The queue of this replica's runs' writes, and the task that sends it."""

    def __init__(self, redis: aioredis.Redis, *, lease_seconds: float) -> None:
        self._flush_script = redis.register_script(_FLUSH)
        self._lease_seconds = lease_seconds
        self._log_seconds = 0
        self._entries: Entries = list
        self._unsent: list[tuple[str, str, bytes]] = []
        """Log entries a flush could not send: sent first with the next one. Lost, a resumed
        stream elsewhere would skip them, or wait for ever for a run's ending among them."""
        self._keys: list[str] = []
        self._args: list[str | int] = []
        """Reservations and releases, in order: their keys, and their arguments."""
        self._waiting: list[asyncio.Future[bool]] = []
        """The reservations' answers, in the order of their writes."""
        self._queued = asyncio.Event()
        self._urgent = asyncio.Event()
        self._closed = False

    def log_from(self, entries: Entries, *, kept_seconds: int) -> None:
        """Append what ``entries()`` gives at each flush, each log kept ``kept_seconds`` after
        its last entry."""
        self._entries = entries
        self._log_seconds = kept_seconds

    def reserve(self, key: str, limit: int, member: str) -> asyncio.Future[bool]:
        """Add ``member`` to the set ``key`` unless it holds ``limit`` members whose
        reservations have not lapsed; the answer comes with the next flush, sent at once."""
        if self._closed:
            raise ConnectionError("this replica's link to Redis is closed")
        answer = asyncio.get_running_loop().create_future()
        self._keys.append(key)
        self._args += ("r", limit, member)
        self._waiting.append(answer)
        self._queued.set()
        self._urgent.set()
        return answer

    def alias(self, key: str, member: str, seconds: int) -> None:
        """Set ``key`` to ``member`` for ``seconds`` with the next flush (queue it before a
        reservation: it goes with that one's flush, sent at once)."""
        self._keys.append(key)
        self._args += ("a", member, seconds)
        self._queued.set()

    def release(self, key: str, member: str) -> None:
        """Remove ``member`` from the set ``key`` with the next flush."""
        self._keys.append(key)
        self._args += ("f", member)
        self._queued.set()

    def wake(self) -> None:
        """There are log entries to send."""
        self._queued.set()

    async def send_forever(self) -> None:
        try:
            while True:
                await self._queued.wait()
                if not self._urgent.is_set():  # nobody waits: let more writes join these
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(GATHER_SECONDS):
                            await self._urgent.wait()
                self._queued.clear()
                self._urgent.clear()
                try:
                    await self._flush()
                except Exception:  # our bug: the next flush must still go
                    log.exception("Redis: a flush failed")
        finally:
            self.close()

    def close(self) -> None:
        """Refuse new writes, and fail the reservations still waiting (writes nobody waits
        for are dropped: a reservation not released lapses with its lease)."""
        self._closed = True
        waiting, self._waiting = self._waiting, []
        self._fail(waiting, ConnectionError("this replica's link to Redis is closed"))

    async def _flush(self) -> None:
        writes, self._keys = self._keys, []
        written, self._args = self._args, []
        waiting, self._waiting = self._waiting, []
        entries, self._unsent = self._unsent + self._entries(), []
        if not entries and not writes:
            return
        keys = [key for key, _, _ in entries]
        keys += writes
        args: list[str | int | float | bytes] = [
            self._lease_seconds,
            2 * max(1, round(self._lease_seconds * 1000)),
            self._log_seconds,
            len(entries),
        ]
        for _, entry_id, entry in entries:
            args += (entry_id, entry)
        args += written
        try:
            reserved: bytes = await self._flush_script(keys=keys, args=args)
        except asyncio.CancelledError:
            self._fail(waiting, ConnectionError("this replica's link to Redis is closed"))
            raise
        except Exception as error:  # Redis away: refuse the reservations, keep the log's
            self._fail(waiting, error)
            # Releases are not kept: a reservation not renewed lapses with its lease.
            self._unsent = _newest(entries, UNSENT_KEPT_BYTES)
            asyncio.get_running_loop().call_later(RETRY_SECONDS, self._queued.set)
            log.warning(
                "Redis: %d log entries (kept to send again) and %d reservations or releases "
                "not sent: %s",
                len(entries),
                len(writes),
                error,
            )
            return
        for answer, made in zip(waiting, reserved, strict=False):
            if not answer.done():  # its run's request may have gone meanwhile
                answer.set_result(made == ord("1"))
        self._fail(waiting[len(reserved) :], RuntimeError("Redis: a reservation unanswered"))

    @staticmethod
    def _fail(waiting: list[asyncio.Future[bool]], error: Exception) -> None:
        for answer in waiting:
            if not answer.done():
                answer.set_exception(error)


def _newest(entries: list[tuple[str, str, bytes]], limit: int) -> list[tuple[str, str, bytes]]:
    """The newest of ``entries`` whose entries together hold at most ``limit`` bytes."""
    kept = 0
    for index in range(len(entries) - 1, -1, -1):
        kept += len(entries[index][2])
        if kept > limit:
            log.error("Redis: dropping %d unsent log entries (too many kept)", index + 1)
            return entries[index + 1 :]
    return entries
