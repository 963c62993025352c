"""Per-key run limits across replicas: a key's live runs, counted in Redis.

A run is reserved in ``hermes:runs:<owner>`` before it starts (the check of the count and the
add are one step of a Lua script, so replicas admitting at once cannot both pass), its replica
renews it with its lease, and it is released when the run ends. A reservation lapses unless
renewed: a replica that dies takes its reservations with it. Reserving and releasing ride the
flushes of ``run_writes``; this module names the keys and keeps them alive.

A reservation is also how any replica finds a run in its first moments, before its row is in
the database (written behind, in batches): a stop or a cancel sent elsewhere at once. A run's
other id (its completion's, its Response's) is written beside it, in the same flush, as an
alias that outlives the row's writing with room to spare.

A run for an end user (docs/end-users.md) is reserved twice in one flush: in its key's set and
in its end user's (``hermes:runs:<owner>/<end user>``, limited by ``limits.runs_per_user``).
When one set refuses, the other's reservation is released again: for a moment a run may be
counted that never starts (a refusal too many, never a run too many).

Every reservation lapses by Redis's clock (``TIME``, read by the scripts that write, renew,
prune and find them), so replicas whose clocks disagree still agree on which have lapsed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from server.replicas.run_writes import RunWrites
from server.runs.manager import user_key

if TYPE_CHECKING:
    import redis.asyncio as aioredis

RUNS_KEY = "hermes:runs:{}"
"""A key's live runs on every replica: a sorted set of run ids scored by when each
reservation lapses unless its replica renews it."""

ALIAS_KEY = "hermes:run-of:{}"
"""The run id of a completion or Response id, while the run's row may not be written yet."""
ALIAS_SECONDS = 60

# KEYS[i] a run set, ARGV[i + 2] its run; ARGV[1] how long a reservation lasts from now (s),
# ARGV[2] a run set's TTL (ms). A run that ended meanwhile (released) is not added back.
_RENEW = """
local time = redis.call('TIME')
local lapses = tonumber(time[1]) + tonumber(time[2]) / 1000000 + tonumber(ARGV[1])
lapses = string.format('%.6f', lapses)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', lapses, ARGV[i + 2])
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
"""

# KEYS[1] the alias of ARGV[1] (a run id or its alias), KEYS[2] the owner's run set. The run's
# id while its reservation has not lapsed, else nil.
_FIND = """
local run = redis.call('GET', KEYS[1]) or ARGV[1]
local lapses = redis.call('ZSCORE', KEYS[2], run)
if not lapses then
  return false
end
local time = redis.call('TIME')
if tonumber(lapses) > tonumber(time[1]) + tonumber(time[2]) / 1000000 then
  return run
end
return false
"""

LiveRuns = Callable[[], list[tuple[str, str]]]
"""``(owner, run_id)`` of this replica's runs in progress (and ``(owner/end_user, run_id)``
for a run of an end user: ``RunManager.live_run_keys``)."""

Refusal = Literal["key", "user"]
"""Whose limit refused a reservation: the key's or its end user's."""


class Reservations:
    """This replica's runs as counted against their keys' limits on every replica."""

    def __init__(self, redis: aioredis.Redis, writes: RunWrites, *, lease_seconds: float) -> None:
        self._redis = redis
        self._writes = writes
        self._lease_seconds = lease_seconds
        self._live_runs: LiveRuns = list
        self._renew_script = redis.register_script(_RENEW)
        self._find_script = redis.register_script(_FIND)

    def track(self, live_runs: LiveRuns) -> None:
        """Renew the reservations of ``live_runs()`` at each :meth:`renew`."""
        self._live_runs = live_runs

    async def reserve(self, owner: str, run_id: str, limit: int, alias: str = "") -> bool:
        """Count ``run_id`` among ``owner``'s live runs on all replicas, unless ``limit`` are
        live already (then False). The reservation lapses after a lease unless renewed.
        ``alias``: the run's other id, by which :meth:`find` finds it too."""
        if alias:
            self._writes.alias(ALIAS_KEY.format(alias), run_id, ALIAS_SECONDS)
        return await self._writes.reserve(RUNS_KEY.format(owner), limit, run_id)

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
        """Count ``run_id`` among ``owner``'s live runs and among its ``end_user``'s, unless
        ``limit`` or ``user_limit`` are live already: None when reserved in both, else whose
        limit refused it (the key's first)."""
        if alias:
            self._writes.alias(ALIAS_KEY.format(alias), run_id, ALIAS_SECONDS)
        users = RUNS_KEY.format(user_key(owner, end_user))
        keys = RUNS_KEY.format(owner)
        # Both queued before either is awaited: they go in one flush.
        for_key, for_user = await asyncio.gather(
            self._writes.reserve(keys, limit, run_id),
            self._writes.reserve(users, user_limit, run_id),
            return_exceptions=True,
        )
        if for_key is True and for_user is True:
            return None
        if for_key is True:
            self._writes.release(keys, run_id)
        if for_user is True:
            self._writes.release(users, run_id)
        for answer in (for_key, for_user):
            if isinstance(answer, BaseException):
                raise answer
        return "key" if not for_key else "user"

    async def find(self, owner: str, run_id: str) -> str | None:
        """The id of ``owner``'s run ``run_id`` (a run id or its alias) if it holds a
        reservation on some replica: it is live, whether or not its row is written yet."""
        found: bytes | str | None = await self._find_script(
            keys=[ALIAS_KEY.format(run_id), RUNS_KEY.format(owner)], args=[run_id]
        )
        return found.decode() if isinstance(found, bytes) else found

    def release(self, owner: str, run_id: str, end_user: str | None = None) -> None:
        """Let go of ``run_id``'s reservation, and its ``end_user``'s when it names one (with
        the next flush: its run's last entry)."""
        self._writes.release(RUNS_KEY.format(owner), run_id)
        if end_user is not None:
            self._writes.release(RUNS_KEY.format(user_key(owner, end_user)), run_id)

    async def renew(self) -> None:
        """Push the lapse of this replica's live runs' reservations a lease ahead (a run that
        ended meanwhile is not added back)."""
        live = self._live_runs()
        if not live:
            return
        ttl_ms = max(1, round(self._lease_seconds * 1000))
        await self._renew_script(
            keys=[RUNS_KEY.format(owner) for owner, _ in live],
            args=[self._lease_seconds, 2 * ttl_ms, *(run_id for _, run_id in live)],
        )
