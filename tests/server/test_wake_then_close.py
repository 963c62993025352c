"""A loop that sleeps until woken or a pause ends (webhook delivery, the cron scheduler) stops
when it is closed right after it was woken. On Python 3.11 ``asyncio.wait_for`` returns the
inner result when the inner wait and the outer cancellation land together, swallowing the
cancellation: the loop went on, and closing it (a server's shutdown) waited for ever."""

from __future__ import annotations

import asyncio
from typing import Any

from server.crons.scheduler import CronScheduler
from server.webhooks.delivery import DeliverySettings, Dispatcher


class _NoDeliveries:
    """A webhook store with nothing due, counting how often it was asked."""

    def __init__(self) -> None:
        self.claims = 0

    async def claim(self, *_: Any, **__: Any) -> list[Any]:
        self.claims += 1
        return []


async def test_a_webhook_dispatcher_woken_just_before_it_is_closed_stops() -> None:
    store = _NoDeliveries()
    dispatcher = Dispatcher(
        store,  # type: ignore[arg-type]
        instance="a",
        secret_of=lambda _delivery: None,
        policy=lambda: None,  # type: ignore[arg-type,return-value]
        settings=DeliverySettings(poll_seconds=30, idle_poll_seconds=30),
    )
    dispatcher.start()
    for _ in range(1000):  # until it sleeps in its wait, having looked once
        if store.claims:
            break
        await asyncio.sleep(0)
    await asyncio.sleep(0)

    dispatcher.wake()  # the wait completes, and the close's cancellation comes with it
    await asyncio.wait_for(dispatcher.close(), timeout=10)


async def test_a_cron_scheduler_woken_just_before_it_is_closed_stops() -> None:
    scheduler = CronScheduler(
        None,  # type: ignore[arg-type]  # tick is replaced: nothing else is read
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        instance="a",
        max_sleep=30,
    )
    ticks = 0

    async def tick() -> float | None:
        nonlocal ticks
        ticks += 1
        return None

    scheduler.tick = tick  # type: ignore[method-assign]
    scheduler.start()
    for _ in range(1000):  # until it sleeps in its wait, having looked once
        if ticks:
            break
        await asyncio.sleep(0)
    await asyncio.sleep(0)

    scheduler.wake()
    await asyncio.wait_for(scheduler.close(), timeout=10)
