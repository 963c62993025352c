"""The scheduler's loop in process, on a real store and an injected clock: each firing starts
its run in a task of its own, so a firing still starting (waiting for its session) is neither
in the way of the next pass nor taken for a lapsed claim and fired again by its own replica."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from starlette.requests import HTTPConnection

from hermes_core.persistence import Store
from hermes_core.persistence.crons import Cron
from server.crons.scheduler import LEASE_SECONDS, CronScheduler
from server.http.auth import KeyRing, Principal
from server.services import Services

T0 = dt.datetime(2027, 1, 4, 12, 0, tzinfo=dt.UTC).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class HeldStarts:
    """Stands for ``start_api_run``: each start waits until ``release`` is set (a run waiting
    for its busy session)."""

    def __init__(self) -> None:
        self.count = 0
        self.release = asyncio.Event()

    async def __call__(
        self, _services: Services, _connection: HTTPConnection, _who: Principal, _body: Any
    ) -> tuple[dict[str, Any], dict[str, str]]:
        self.count += 1
        await self.release.wait()
        return {"id": f"run_{self.count}"}, {}


async def _until(check: Callable[[], Any], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not (held := await check() if asyncio.iscoroutinefunction(check) else check()):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return bool(held)


async def test_a_firing_still_starting_is_not_fired_again_once_its_lease_is_past(
    store: Store,
) -> None:
    await store.crons.add(
        Cron(
            id="cron_1",
            owner="alice",
            schedule="0 0 * * *",
            timezone="UTC",
            model="hermes-agent",
            body={"input": "tick", "session": "busy", "metadata": {}, "webhook": None},
            paused=False,
            next_fire_at=T0,
            created_at=T0 - 86400,
            updated_at=T0 - 86400,
        )
    )
    clock, starts = Clock(T0 + 1), HeldStarts()
    services = cast(
        Services,
        SimpleNamespace(
            runs=SimpleNamespace(draining=False),
            keyring=KeyRing({"sk-alice": Principal("alice")}),
        ),
    )
    scheduler = CronScheduler(services, store, starts, instance="a", clock=clock)
    scheduler.start()
    try:
        assert await _until(lambda: starts.count == 1)
        (firing,) = await store.crons.firings("alice", "cron_1")
        # Its claim's lease is past (the renewal, every third of it, has not come yet):
        # the next pass finds it lapsed and takes it over.
        clock.now = T0 + 1 + 2 * LEASE_SECONDS
        scheduler.wake()

        async def taken_over() -> bool:
            (now,) = await store.crons.firings("alice", "cron_1")
            return (now.claimed_until or 0) > (firing.claimed_until or 0)

        assert await _until(taken_over)
        assert starts.count == 1  # the firing starting here was not started a second time
        starts.release.set()
        await scheduler.settled()
        (started,) = await store.crons.firings("alice", "cron_1")
        assert (started.status, started.run_id) == ("started", "run_1")
    finally:
        starts.release.set()
        await scheduler.close()
