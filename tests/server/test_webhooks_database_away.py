"""Webhook delivery while its database is away: said once, not at every poll."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hermes_core.persistence.webhooks import Delivery
from hermes_core.tools.web.guard import AddressPolicy
from server.webhooks.delivery import DeliverySettings, Dispatcher


class _AwayThenBack:
    """A webhook store whose database refuses ``failures`` claims, then answers (nothing due)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.claims = 0
        self.back = asyncio.Event()

    async def claim(
        self, instance: str, *, now: float, lease_seconds: float, limit: int
    ) -> list[Delivery]:
        self.claims += 1
        if self.claims <= self.failures:
            raise ConnectionRefusedError("the database is away")
        self.back.set()
        return []


async def test_claims_failing_while_the_database_is_away_are_logged_once_and_the_return_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _AwayThenBack(failures=6)
    dispatcher = Dispatcher(
        store,  # type: ignore[arg-type]  # only claims are made while nothing is due
        instance="replica-1",
        secret_of=lambda delivery: None,
        policy=AddressPolicy,
        settings=DeliverySettings(poll_seconds=0.001, idle_poll_seconds=0.002),
    )
    caplog.set_level(logging.INFO, logger="hermes.webhooks")
    dispatcher.start()
    try:
        await asyncio.wait_for(store.back.wait(), timeout=60)
    finally:
        await dispatcher.close()
    lines = [r for r in caplog.records if r.name == "hermes.webhooks"]
    assert [r.levelno for r in lines] == [logging.ERROR, logging.WARNING]
    assert lines[0].exc_info is not None  # the first failure says why, with its traceback
    assert "works again" in lines[1].getMessage()
    assert store.claims > 6
