"""Group commit: the writes of every run share transactions.

Runs emit many small writes (a message, a run's status, token counters). Committing each on
its own would cost a transaction, and on SQLite an fsync, per write, on the hot path of every
request. Instead writes are queued without waiting, and one task commits whatever has queued
while the previous commit was in flight, as a single transaction with one ``executemany`` per
run of identical statements. A caller that needs durability — before tools run, before a run
is reported finished — awaits :meth:`WriteBehind.flush`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable

log = logging.getLogger(__name__)

Write = tuple[Executable, Mapping[str, Any]]


class WriteBehind:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._queued: list[Write] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        """Writes that could not be committed (logged); a health signal."""

    def submit(self, statement: Executable, params: Mapping[str, Any]) -> None:
        """Queue a write; it is committed soon, in order with every other queued write."""
        self._queued.append((statement, params))
        self._start()

    async def flush(self) -> None:
        """Return once every write submitted before this call is committed (or failed)."""
        if self._task is None and not self._queued:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._start()
        await asyncio.shield(waiter)

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._commit_loop())

    async def _commit_loop(self) -> None:
        try:
            # A waiter is released only by a commit that began after it arrived, and every
            # write queued before it is in that commit or an earlier one.
            while self._queued or self._waiters:
                writes, self._queued = self._queued, []
                waiters, self._waiters = self._waiters, []
                if writes:
                    await self._commit(writes)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
        finally:
            self._task = None
            if self._queued or self._waiters:  # cancelled mid-way: do not strand anyone
                self._start()

    async def _commit(self, writes: list[Write]) -> None:
        try:
            async with self._engine.begin() as conn:
                await _execute_grouped(conn, writes)
        except SQLAlchemyError:
            # One bad write must not cost the others: retry them one by one.
            for write in writes:
                try:
                    async with self._engine.begin() as conn:
                        await conn.execute(write[0], write[1])
                except SQLAlchemyError as exc:
                    self.failures += 1
                    log.error("a store write failed: %s", type(exc).__name__, exc_info=exc)


async def _execute_grouped(conn: AsyncConnection, writes: list[Write]) -> None:
    group: list[Mapping[str, Any]] = []
    statement: Executable | None = None
    for stmt, params in writes:
        if stmt is not statement and group:
            assert statement is not None
            await conn.execute(statement, group)
            group = []
        statement = stmt
        group.append(params)
    if group and statement is not None:
        await conn.execute(statement, group)
