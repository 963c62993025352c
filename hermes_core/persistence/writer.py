"""Group commit: the writes of every run share transactions.

Runs emit many small writes (a message, a run's status, token counters). Committing each on
its own would cost a transaction per write on the hot path of every request. Instead writes
are queued without waiting, and one task commits whatever has queued while the previous commit
was in flight (or during a short pause before the first, see :data:`GATHER_SECONDS`), as a
single transaction with one ``executemany`` per statement. A caller that
needs durability — before tools run, before a run is reported finished — awaits
:meth:`WriteBehind.flush`.

The commits themselves are a :class:`Committer`'s, on a thread of their own (see
:mod:`~hermes_core.persistence.committers`).

Grouping a batch by statement reorders it, so each write names its :class:`Phase`: a batch runs
phase by phase, and within a phase each statement's writes keep their order. Writes of one
phase must therefore not depend on each other's order.

A full disk is transient (see :mod:`~hermes_core.persistence.disk_full`): the writes it refuses
stay at the head of the queue, in order, and are retried with backoff until space is freed;
a flush meanwhile raises :class:`StorageFull` rather than wait for the disk, so no run hangs
on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from enum import IntEnum
from typing import Any, Protocol, TypeVar

from sqlalchemy.sql import Executable

from hermes_core.persistence.disk_full import StorageFull, what_they_were

log = logging.getLogger(__name__)
T = TypeVar("T")


class Phase(IntEnum):
    CREATE = 0
    """Rows others refer to (sessions)."""
    DERIVE = 1
    """Rows copied from rows created in this batch (a compression child from its parent)."""
    APPEND = 2
    """Rows that refer to those (messages, runs)."""
    INDEX = 3
    """Derived data over what was appended (the search index of new messages)."""
    UPDATE = 4
    """Changes to existing rows that commute (token counters, a session's end, responses)."""
    SETTLE = 5
    """A record's final state, after any other update of it (a run's ending)."""
    RELEASE = 6
    """Deletions (a conversation's lock, once the turn's writes are in)."""


Write = tuple[Executable, Mapping[str, Any], Phase]
Statements = list[tuple[Executable, list[Mapping[str, Any]]]]


class WritesHeld(Exception):
    """A committer's answer when the disk filled: ``held`` — the first write the disk refused
    and every write after it, in the order they were tried — must be retried; ``failures``
    others failed for good (each logged)."""

    def __init__(self, held: list[Write], failures: int) -> None:
        super().__init__(f"{len(held)} writes held for lack of disk space")
        self.held = held
        self.failures = failures


GATHER_SECONDS = 0.02
"""How long writes nobody waits for may gather before their commit starts.

A commit costs about half a millisecond of CPU whatever it holds (SQLite appends every page it
touched to the WAL). Without a pause, a lone request commits what its run queued at the
start, and again at the end; with one, a short run's writes share one commit. A flush never
waits for the pause."""

RETRY_SECONDS = (0.5, 10.0)
"""The first and the longest pause before writes waiting for disk space are tried again (a
flush tries at once: the next turn of a conversation does not wait for the backoff)."""

MAX_WAITING_WRITES = 10_000
"""Writes kept while the disk is full; later ones are lost (logged, counted in ``failures``)
rather than let a disk that stays full fill the memory as well."""


class WriteBehind:
    def __init__(
        self,
        committer: Committer,
        *,
        gather_seconds: float = GATHER_SECONDS,
        retry_seconds: tuple[float, float] = RETRY_SECONDS,
        max_waiting: int = MAX_WAITING_WRITES,
    ) -> None:
        self._committer = committer
        self._gather_seconds = gather_seconds
        self._retry_seconds = retry_seconds
        self._max_waiting = max_waiting
        self._queued: list[Write] = []
        self._waiters: list[asyncio.Future[bool]] = []
        """Each resolved True once its writes are committed (or failed for good), False when
        some still wait for disk space."""
        self._task: asyncio.Task[None] | None = None
        self._hurry: asyncio.Future[None] | None = None
        """Resolved to cut a pause short (a flush arrived)."""
        self._full_since: float | None = None
        """Set (monotonic) while writes refused for lack of space head the queue."""
        self._retry_in = retry_seconds[0]
        self._refused = 0
        """Writes lost since the disk filled because too many were waiting already."""
        self.failures = 0
        """Writes that could not be committed (logged); a health signal."""

    @property
    def waiting_for_space(self) -> int:
        """Writes queued behind a full disk (0 while the disk has space)."""
        return len(self._queued) if self._full_since is not None else 0

    def submit(self, statement: Executable, params: Mapping[str, Any], *, phase: Phase) -> None:
        """Queue a write; it is committed soon (see :class:`Phase` for the order).

        ``statement`` must be a constant (a module's, or one a store builds once), with the
        row in ``params``: the SQLite writer compiles each statement once and keeps it."""
        if self._full_since is not None and len(self._queued) >= self._max_waiting:
            self._refuse()
            return
        self._queued.append((statement, params, phase))
        self._start()

    async def flush(self) -> None:
        """Return once every write submitted before this call is committed (or failed).

        Raises :class:`StorageFull` when some of them are waiting for disk space: they were
        tried once more for this call, and stay queued to be retried."""
        if self._task is None and not self._queued:
            return
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._start()
        _resolve(self._hurry, None)
        # Not shielded: a caller cancelled here cancels only its own waiter, which the commit
        # loop then skips (a shield cost every run's ending a second future and callbacks).
        if not await waiter:
            raise StorageFull(self.waiting_for_space)

    async def close(self) -> None:
        """Commit what is queued, then release the writer's connections and thread. Writes
        still waiting for disk space then are lost: the log says how many, and of what."""
        try:
            await self.flush()
        except StorageFull:
            await self._give_up()
        await self._committer.close()

    async def _give_up(self) -> None:
        lost, self._queued = self._queued, []
        self.failures += len(lost)
        log.error(
            "the store's disk is still full as the writer closes: %d writes are lost (%s). "
            "Runs they would have ended are marked interrupted, and their conversations "
            "unlocked, when this instance next starts.",
            len(lost),
            what_they_were([statement for statement, _params, _phase in lost]),
        )
        task = self._task
        if task is not None:
            task.cancel()  # it would go on retrying (nothing is left to retry or wait for)
            await asyncio.wait([task])

    def _refuse(self) -> None:
        self.failures += 1
        self._refused += 1
        if self._refused == 1:
            log.error(
                "the store's disk is still full and %d writes wait for space: further writes "
                "are lost until it has space again",
                len(self._queued),
            )

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._commit_loop())

    async def _commit_loop(self) -> None:
        try:
            if self._gather_seconds and not self._waiters:
                await self._pause(self._gather_seconds)
            # A waiter is released only by a commit that began after it arrived, and every
            # write queued before it is in that commit or an earlier one.
            while self._queued or self._waiters:
                if self._full_since is not None and not self._waiters:
                    await self._pause(self._retry_in)
                    self._retry_in = min(2 * self._retry_in, self._retry_seconds[1])
                writes, self._queued = self._queued, []
                waiters, self._waiters = self._waiters, []
                held: list[Write] = []
                try:
                    if writes:
                        held = await self._commit(writes)
                        self._hold(held)
                finally:  # whatever happened to the batch, nobody waits for it forever
                    for waiter in waiters:
                        _resolve(waiter, not held)
        finally:
            self._task = None
            if self._queued or self._waiters:  # cancelled mid-way: do not strand anyone
                self._start()

    async def _commit(self, writes: list[Write]) -> list[Write]:
        """Commit ``writes``; returns those to try again once the disk has space."""
        try:
            self.failures += await self._committer.commit(writes)
        except WritesHeld as full:
            self.failures += full.failures
            return full.held
        except Exception:
            # A committer answers for each write it was given; one that raises instead has a
            # bug. Its batch is counted lost, and the writer goes on with the next one.
            log.exception("a store commit failed; %d writes lost", len(writes))
            self.failures += len(writes)
        return []

    def _hold(self, held: list[Write]) -> None:
        """Put writes the disk refused back at the head of the queue (before anything queued
        meanwhile, so the order holds), and say when the disk filled and when it has space
        again."""
        if held:
            self._queued[:0] = held
            if self._full_since is None:
                self._full_since = time.monotonic()
                self._retry_in = self._retry_seconds[0]
                log.error(
                    "the store's disk is full: %d writes (%s) are kept queued and retried "
                    "until space is freed",
                    len(held),
                    what_they_were([statement for statement, _params, _phase in held]),
                )
        elif self._full_since is not None:
            log.warning(
                "the store's disk has space again: the writes kept waiting for it are "
                "committed (%.0f s after it filled; %d were lost meanwhile)",
                time.monotonic() - self._full_since,
                self._refused,
            )
            self._full_since = None
            self._refused = 0

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until a flush arrives."""
        loop = asyncio.get_running_loop()
        hurry = self._hurry = loop.create_future()
        timer = loop.call_later(seconds, _resolve, hurry, None)
        try:
            await hurry
        finally:
            timer.cancel()
            self._hurry = None


def _resolve(future: asyncio.Future[T] | None, value: T) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class Committer(Protocol):
    async def commit(self, writes: list[Write]) -> int:
        """Commit ``writes``; returns how many failed (each logged)."""
        ...

    async def close(self) -> None: ...
