"""Sending deliveries: every replica polls the store for due deliveries, claims a few (one
replica wins each row) and posts them; a 2xx is delivered, anything else (another status, a
refused address, a transport error, a timeout) is tried again after a backoff, until the
attempts run out. Redirects are not followed: a webhook endpoint answers where it is."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from hermes_core.imports_off_loop import import_off_loop
from hermes_core.persistence.webhooks import Delivery, WebhookStore
from hermes_core.tools.web.guard import AddressPolicy
from server.webhooks import signing

log = logging.getLogger("hermes.webhooks")


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    poll_seconds: float = 1.0
    """How often a replica looks for due deliveries while there are some; it looks at once
    for its own new ones, and when one of its retries is due."""
    idle_poll_seconds: float = 10.0
    """While it finds none, it looks less and less often, down to this: other replicas'
    deliveries, and those a dead replica left, wait at most this long for a look."""
    lease_seconds: float = 60.0
    """How long a claim holds: a replica that died holding one loses it after this."""
    timeout_seconds: float = 10.0
    """One attempt, connection to answer."""
    first_retry_seconds: float = 1.0
    """The wait after the first failure, doubling after each next one…"""
    max_retry_seconds: float = 3600.0
    """…up to this."""
    max_attempts: int = 15
    """Then the delivery is ``failed`` (about four hours after the event)."""
    batch: int = 16

    def retry_after(self, attempts: int) -> float:
        """The wait before the next attempt, once ``attempts`` attempts failed."""
        wait: float = self.first_retry_seconds * 2.0 ** (attempts - 1)
        return min(wait, self.max_retry_seconds)


SecretOf = Callable[[Delivery], str | None]
"""The secret a delivery is signed with (None: its endpoint is no longer configured)."""


class Dispatcher:
    """This replica's sender of deliveries."""

    def __init__(
        self,
        store: WebhookStore,
        *,
        instance: str,
        secret_of: SecretOf,
        policy: Callable[[], AddressPolicy],
        settings: DeliverySettings,
    ) -> None:
        self.store = store
        self.instance = instance
        self.secret_of = secret_of
        self.policy = policy
        self.settings = settings
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="hermes-webhooks")

    def wake(self) -> None:
        """New deliveries are due: look now, not at the next poll."""
        self._wake.set()

    async def close(self) -> None:
        """Stop sending; claims still held lapse and another start (or replica) sends them."""
        tasks = [t for t in (self._task, *self._sending) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _loop(self) -> None:
        wait = self.settings.poll_seconds
        failing_since: float | None = None
        """While claiming fails (the database away): when it began. Said once when it starts
        failing and once when it works again, not with a traceback at every poll."""
        while True:
            try:
                claimed = await self.store.claim(
                    self.instance,
                    now=time.time(),
                    lease_seconds=self.settings.lease_seconds,
                    limit=self.settings.batch,
                )
            except Exception:  # a database hiccup must not end delivery for good
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.exception(
                        "claiming webhook deliveries failed; trying again quietly until it works"
                    )
                claimed = []
            else:
                if failing_since is not None:
                    log.warning(
                        "claiming webhook deliveries works again, after %.0f s",
                        time.monotonic() - failing_since,
                    )
                    failing_since = None
            for delivery in claimed:
                task = asyncio.create_task(self._attempt(delivery))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
            if len(claimed) == self.settings.batch:
                continue  # more may be due
            wait = (
                self.settings.poll_seconds
                if claimed
                else min(wait * 2, self.settings.idle_poll_seconds)
            )
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
            # lands as the wake does, and close() then waited on this loop for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            if self._wake.is_set():
                wait = self.settings.poll_seconds
            self._wake.clear()

    async def _attempt(self, delivery: Delivery) -> None:
        secret = self.secret_of(delivery)
        if secret is None:
            await self.store.attempt_failed(
                delivery.id,
                status_code=None,
                error="the webhook is no longer configured",
                retry_at=None,
            )
            return
        status, error = await self._post(delivery, secret)
        now = time.time()
        try:
            if error is None and status is not None:
                await self.store.delivered(delivery.id, status_code=status, now=now)
                return
            attempts = delivery.attempts + 1
            retry_at = (
                now + self.settings.retry_after(attempts)
                if attempts < self.settings.max_attempts
                else None
            )
            log.warning(
                "webhook %s (%s) attempt %d failed: %s",
                delivery.id,
                delivery.event_type,
                attempts,
                error,
            )
            await self.store.attempt_failed(
                delivery.id, status_code=status, error=error or "", retry_at=retry_at
            )
            if retry_at is not None:  # look again when it is due, however idle the polls
                asyncio.get_running_loop().call_later(retry_at - now + 0.05, self._wake.set)
        except Exception:  # its claim lapses and the delivery is tried again
            log.exception("recording webhook delivery %s failed", delivery.id)

    async def _post(self, delivery: Delivery, secret: str) -> tuple[int | None, str | None]:
        """One attempt: the status the endpoint answered (None: no answer) and why it is a
        failure (None: delivered)."""
        await import_off_loop("aiohttp")  # a server starts without it
        import aiohttp

        from hermes_core.tools.web.guarded_resolver import GuardedResolver

        policy = self.policy()
        headers = signing.headers(secret, delivery.id, int(time.time()), delivery.body)
        try:
            policy.check_url(delivery.url)
            connector = aiohttp.TCPConnector(resolver=GuardedResolver(policy), use_dns_cache=False)
            timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds)
            async with (
                aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
                session.post(
                    delivery.url,
                    data=delivery.body.encode(),
                    headers=headers,
                    allow_redirects=False,
                ) as answer,
            ):
                status = answer.status
        except TimeoutError:
            return None, "the endpoint did not answer in time"
        except (aiohttp.ClientError, OSError) as failed:
            return None, str(failed) or type(failed).__name__
        if 200 <= status < 300:
            return status, None
        return status, f"the endpoint answered {status}"
