"""The scheduler: one task per replica that fires the schedules that are due.

Each wake costs one query (the active crons that fire first), and every half lease one more
(claims that lapsed); it sleeps until the earliest next firing, at most ``max_sleep``
seconds, so a cron made or changed on another replica is seen within that. A due cron is
fired by the replica whose claim wins (see ``hermes_core/persistence/crons.py``); the firing
starts a run exactly as ``POST /v1/runs`` does, through the function the app hands in (the
routes sit above this package), in a task of its own: starting a run may wait for its busy
session (up to the session wait, or for ever under ``enqueue``), and meanwhile the other
crons still fire on time.

Missed firings (every replica down, or a late wake): only the most recent time that was due is
fired, if it is at most ``grace_seconds`` old; older times are skipped. The next firing is
then the first time after now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import HTTPConnection

from hermes_core.errors import InvalidRequestError
from hermes_core.errors import disk_full as storage_full
from hermes_core.persistence import Store
from hermes_core.persistence.crons import Cron, Firing
from server.crons.expression import BadSchedule, parse
from server.errors import (
    APIError,
    RedisUnavailable,
    RunLimitExceeded,
    ServerDraining,
    SessionBusy,
)
from server.http.auth import Principal
from server.protocol.schemas.runs import RunCreateRequest
from server.runs.manager import new_id
from server.services import Services

log = logging.getLogger(__name__)

StartRun = Callable[
    [Services, HTTPConnection, Principal, RunCreateRequest],
    Awaitable[tuple[dict[str, Any], dict[str, str]]],
]
"""``server.routes.runs.start_api_run``: what ``POST /v1/runs`` does."""

GRACE_SECONDS = 3600.0
"""How old a missed firing may be and still be fired (once, for the most recent time)."""
LEASE_SECONDS = 60.0
"""How long a claimed firing whose replica stopped renewing it (renewed every third of it while
its run starts) is held before another replica retakes it; with replicas, their lease."""
CRON_ID_KEY = "hermes_cron_id"
"""The metadata key that names the cron a run was fired by (``GET /v1/runs`` shows it)."""
NO_KEY = "The API key that made this cron is no longer configured: its firings start no run."
NO_KEY_CODE = "key_not_configured"
INTERNAL = "The server had an internal error starting the run (its log tells more)."
_BATCH = 20


def refusal(error: Exception) -> tuple[str, str]:
    """Why a firing's run did not start, as ``(code, message)``: what ``POST /v1/runs``
    would have answered the cron's key (the same code and message, the key's own), so that
    the cron shows it (``last_error``). Anything else is told as an internal error: its text
    (a database's, a library's) may hold what the key must not see."""
    if isinstance(error, APIError):
        return error.code or "run_refused", error.message
    if isinstance(error, InvalidRequestError):
        return "invalid_request", error.message
    if isinstance(error, SessionBusy):
        return "session_busy", str(error)
    if isinstance(error, RunLimitExceeded):
        return "rate_limit_exceeded", error.message
    if isinstance(error, RedisUnavailable):
        return "redis_unavailable", "The server could not reach the replicas' Redis."
    if storage_full(error):
        return "insufficient_storage", "The server's disk was full: the run was not recorded."
    return "server_error", INTERNAL


def planned(cron: Cron, now: float, grace_seconds: float) -> tuple[float | None, float | None]:
    """What a due ``cron`` does at ``now``: the time it fires for (None: every missed time is
    older than the grace, nothing fires) and its next firing time after now."""
    schedule = parse(cron.schedule, cron.timezone)
    due = cron.next_fire_at if cron.next_fire_at is not None else now
    oldest = now - grace_seconds
    first = due if due >= oldest else schedule.next_after(oldest - 1)
    latest: float | None = None
    if first is not None and first <= now:
        latest = first
        while (following := schedule.next_after(latest)) is not None and following <= now:
            latest = following
    return latest, schedule.next_after(now)


def _connection() -> HTTPConnection:
    """What a firing's run sees of "its request": no headers (no approval wait, no memory
    scope), a local base URL for its file links."""
    return HTTPConnection(
        {
            "type": "http",
            "scheme": "http",
            "server": ("localhost", 80),
            "path": "/v1/runs",
            "root_path": "",
            "query_string": b"",
            "headers": [],
        }
    )


class CronScheduler:
    def __init__(
        self,
        services: Services,
        store: Store,
        start: StartRun,
        *,
        instance: str,
        clock: Callable[[], float] = time.time,
        max_sleep: float = 10.0,
        grace_seconds: float = GRACE_SECONDS,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        self.services = services
        self.store = store
        self.start_run = start
        self.instance = instance
        self.clock = clock
        self.max_sleep = max_sleep
        self.grace_seconds = grace_seconds
        self.lease_seconds = lease_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_retake = 0.0
        self._firing: dict[str, asyncio.Task[None]] = {}
        """Firings whose runs are starting here, by id."""

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever(), name="hermes-crons")

    def wake(self) -> None:
        """Look again now (a cron was made or changed here)."""
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        # A run still starting (waiting for its session) starts no more here: its claim is
        # given back, and another replica starts it.
        for firing in self._firing.values():
            firing.cancel()
        await asyncio.gather(*self._firing.values(), return_exceptions=True)

    async def settled(self) -> None:
        """Until every firing begun here has started its run (or recorded why not)."""
        while self._firing:
            await asyncio.gather(*self._firing.values(), return_exceptions=True)

    async def _forever(self) -> None:
        while True:
            try:
                wake_at = await self._look()
            except Exception:  # a failed pass (the database away) must not end the next one
                log.exception("firing schedules failed")
                wake_at = None
            now = self.clock()
            pause = self.max_sleep if wake_at is None else max(0.0, wake_at - now)
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
            # lands as the wake does, and stopping the scheduler then waited for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(pause, self.max_sleep)):
                    await self._wake.wait()
            self._wake.clear()

    async def tick(self) -> float | None:
        """One pass to its end: what is due fired (its runs started, or why not recorded),
        lapsed claims retaken; when the next cron is due."""
        upcoming = await self._look()
        await self.settled()
        return upcoming

    async def _look(self) -> float | None:
        """Claim what is due and lapsed claims, each firing's run starting in a task of its
        own; when the next cron is due."""
        if self.services.runs.draining:  # stopping: the other replicas fire what is due
            return None
        now = self.clock()
        upcoming: float | None = None
        first = await self.store.crons.earliest(_BATCH)
        for cron in first:
            assert cron.next_fire_at is not None  # earliest() leaves the others out
            if cron.next_fire_at > now:
                upcoming = cron.next_fire_at
                break
            await self._due(cron, now)
        else:
            # Every cron read was due and has moved on to its next time (or a whole batch was
            # due, and more may be): look again at once, not after the longest sleep.
            if first:
                upcoming = now
        # Claims lapse whether or not their cron is still active (one paused after a claim
        # still fires that time): looked for every half lease, one indexed query.
        if now >= self._next_retake:
            self._next_retake = now + self.lease_seconds / 2
            for firing in await self.store.crons.retake(
                self.instance, now=now, lease_seconds=self.lease_seconds
            ):
                if firing.id in self._firing:  # still starting here, its renewal late
                    continue
                owner = await self.store.crons.cron_of(firing)
                if owner is None:
                    await self.store.crons.failed(
                        firing.id, "The cron was deleted.", code="cron_not_found"
                    )
                else:
                    self._fire_apart(owner, firing)
        return upcoming

    async def _due(self, cron: Cron, now: float) -> None:
        try:
            scheduled, following = planned(cron, now, self.grace_seconds)
        except BadSchedule:  # kept before a rule changed: never fire it again
            scheduled, following = None, None
        firing = await self.store.crons.claim(
            cron,
            scheduled_at=scheduled,
            next_fire_at=following,
            firing_id=new_id("cronfire_"),
            instance=self.instance,
            now=now,
            lease_seconds=self.lease_seconds,
        )
        if firing is not None:
            self._fire_apart(cron, firing)

    def _fire_apart(self, cron: Cron, firing: Firing) -> None:
        task = asyncio.create_task(self.fire(cron, firing), name=f"hermes-cron-{cron.id}")
        self._firing[firing.id] = task
        task.add_done_callback(lambda _: self._firing.pop(firing.id, None))

    async def _renew(self, firing: Firing) -> None:
        """Keep the claim while the run starts (it may wait for its session): only a replica
        that died loses its claims."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            until = self.clock() + self.lease_seconds
            if not await self.store.crons.renew(firing.id, self.instance, until=until):
                return

    async def fire(self, cron: Cron, firing: Firing) -> None:
        """Start the firing's run and record it (a failure to start is recorded instead)."""
        body = cron.body
        metadata = {**(body.get("metadata") or {}), CRON_ID_KEY: cron.id}
        # The key as configured now, not a bare name: its profiles, trust and budgets hold
        # the firing's run as they would hold a request of it; a removed key's crons stop.
        principal = self.services.keyring.principal_named(cron.owner)
        if principal is None:
            log.warning("cron %s was not fired: no configured key is its owner's", cron.id)
            await self.store.crons.failed(firing.id, NO_KEY, code=NO_KEY_CODE)
            return
        try:
            request = RunCreateRequest.model_validate(
                {
                    "model": cron.model,
                    "input": body["input"],
                    "instructions": body.get("instructions"),
                    "session": body.get("session"),
                    "metadata": metadata,
                    "webhook": body.get("webhook"),
                }
            )
            renewing = asyncio.create_task(self._renew(firing))
            try:
                described, headers = await self.start_run(
                    self.services, _connection(), principal, request
                )
            finally:
                renewing.cancel()
                await asyncio.gather(renewing, return_exceptions=True)
        except ServerDraining:  # this replica is stopping: another one starts the run
            await self.store.crons.release(firing.id, self.instance)
            return
        except asyncio.CancelledError:  # closing while the run waited to start: the same
            await self.store.crons.release(firing.id, self.instance)
            raise
        except Exception as error:
            code, message = refusal(error)
            if code == "server_error":
                log.exception("cron %s could not start its run", cron.id)
            else:
                log.warning("cron %s could not start its run: %s (%s)", cron.id, message, code)
            await self.store.crons.failed(firing.id, message, code=code)
            return
        # Steered into its session's running run: that run is the firing's, as it is the
        # answer to a POST /v1/runs that steered.
        steered = "x-hermes-steered-into" in headers
        await self.store.crons.started(firing.id, described["id"], steered=steered)


def scheduling(start: StartRun) -> Callable[[Services, Store], CronScheduler]:
    """What ``Services.schedules`` calls once the store is open: a started scheduler whose
    firings start runs with ``start``."""

    def begin(services: Services, store: Store) -> CronScheduler:
        # With replicas, a dead replica's claims lapse as its runs' leases do.
        lease = services.cluster.lease_seconds if services.cluster else LEASE_SECONDS
        scheduler = CronScheduler(
            services, store, start, instance=store.runs.instance, lease_seconds=lease
        )
        scheduler.start()
        return scheduler

    return begin
