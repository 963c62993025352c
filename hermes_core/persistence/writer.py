"""Group commit: the writes of every run share transactions.

Runs emit many small writes (a message, a run's status, token counters). Committing each on
its own would cost a transaction per write on the hot path of every request. Instead writes
are queued without waiting, and one task commits whatever has queued while the previous commit
was in flight (or during a short pause before the first, see :data:`GATHER_SECONDS`), as a
single transaction with one ``executemany`` per statement. A caller that
needs durability — before tools run, before a run is reported finished — awaits
:meth:`WriteBehind.flush`.

The commits run on a thread of their own. A commit talks to the driver several times, and on
the server's event loop each of those turns would queue behind every request in progress (a
commit then takes a hundred times longer under load, and every run waits on it). The loop
hands a batch over and awaits one future. On PostgreSQL the thread runs an asyncpg engine on
an event loop of its own. On SQLite it uses the plain ``sqlite3`` driver, and hands it each
statement compiled once by SQLAlchemy: the Python that SQLAlchemy runs per execution costs
more CPU than SQLite's own work for these small writes, and it holds the GIL the server's
event loop needs (measured: ~1 ms of writer CPU per run, and the loop's socket calls slowed by
waiting for the GIL).

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
import contextlib
import functools
import logging
import operator
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Protocol, TypeVar

from sqlalchemy.dialects.sqlite.pysqlite import dialect as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Executable

from hermes_core import json_codec
from hermes_core.persistence.disk_full import StorageFull, disk_full, what_they_were
from hermes_core.persistence.storable import holds_unstorable, storable

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
        if not await asyncio.shield(waiter):
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


class SqliteCommitter:
    """Transactions on a SQLite file through one ``sqlite3`` connection of the writer's own
    thread; each statement runs through the driver's ``executemany`` with its SQL compiled
    once by SQLAlchemy."""

    def __init__(self, path: str, *, setup: Callable[[sqlite3.Connection], None]) -> None:
        self._path = path
        self._setup = setup
        self._dialect = sqlite_dialect(json_serializer=json_codec.dumps_text)
        self._thread = _JobThread("hermes-store-writer")
        self._connection: sqlite3.Connection | None = None
        self._compiled: dict[tuple[int, tuple[str, ...]], _Compiled] = {}

    async def commit(self, writes: list[Write]) -> int:
        return await self._thread.run(functools.partial(self._commit, writes))

    def _connect(self) -> sqlite3.Connection:
        if self._connection is None:
            # Autocommit mode: transactions are the explicit BEGIN … COMMIT below.
            self._connection = sqlite3.connect(self._path, isolation_level=None)
            self._setup(self._connection)
        return self._connection

    def _commit(self, writes: list[Write]) -> int:
        connection = self._connect()
        try:
            connection.execute("BEGIN")
            for statement, params in grouped(writes):
                compiled = self._compile(statement, params[0])
                connection.executemany(compiled.sql, [compiled.row(p) for p in params])
            connection.execute("COMMIT")
        except Exception:  # the driver's refusal, or a value its encoders cannot write
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            return self._one_by_one(connection, writes)
        return 0

    def _one_by_one(self, connection: sqlite3.Connection, writes: list[Write]) -> int:
        # One bad write must not cost the others.
        def write_alone(write: Write) -> None:
            statement, params, _phase = write
            with connection:  # in autocommit mode: BEGIN … COMMIT, or ROLLBACK on error
                connection.execute("BEGIN")
                compiled = self._compile(statement, params)
                connection.execute(compiled.sql, compiled.row(params))

        failures = 0
        ordered = sorted(writes, key=_phase_of)
        for index, write in enumerate(ordered):
            try:
                write_alone(write)
            except Exception as exc:
                _hold_if_full(exc, ordered, index, failures)
                cleaned = _cleaned(write)
                try:
                    if cleaned is None:
                        raise
                    write_alone(cleaned)
                except Exception as again:
                    _hold_if_full(again, ordered, index, failures)
                    failures += 1
                    _log_failure(exc)
                else:
                    _log_cleaned()
        return failures

    def _compile(self, statement: Executable, params: Mapping[str, Any]) -> _Compiled:
        # Statements are constants (see WriteBehind.submit): compiled once per parameter set.
        key = (id(statement), tuple(params))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = _Compiled.of(statement, tuple(params), self._dialect)
            self._compiled[key] = compiled
        return compiled

    async def close(self) -> None:
        def close_connection() -> None:
            if self._connection is not None:
                self._connection.close()

        await self._thread.run(close_connection)
        await self._thread.stop()


class _JobThread:
    """A thread of its own that runs jobs in order, each answered on the loop that asked.

    Cheaper per job than ``ThreadPoolExecutor.submit`` + ``asyncio.wrap_future`` (a concurrent
    future with its condition variable, a semaphore, and a chain of callbacks back to the loop):
    a commit is handed over once per run, so this is on every request's path.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def run(self, job: Callable[[], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[T] = loop.create_future()
        self._jobs.put((job, answer, loop))
        return answer

    async def stop(self) -> None:
        self._jobs.put(None)
        await asyncio.to_thread(self._thread.join)

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, answer, loop = item
            try:
                outcome: tuple[Any, BaseException | None] = (job(), None)
            except BaseException as exc:  # handed to the caller, as an executor would
                outcome = (None, exc)
            # RuntimeError: the loop closed meanwhile, and nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_answer, answer, *outcome)


_Job = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


def _answer(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement compiled for the driver: its SQL, and how one write's params become a row
    (in the SQL's parameter order, through the column types' conversions, e.g. JSON)."""

    statement: Executable
    """Kept so that its ``id`` (the cache key) cannot be reused by another object."""
    sql: str
    pick: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    """The SQL's parameters, in order, from a write's params."""
    convert: tuple[tuple[int, Callable[[Any], Any]], ...]
    """(position, conversion) of the parameters whose column type converts them."""
    built_in: Mapping[str, Any]
    """Values compiled into the statement; a write's params override them."""

    @classmethod
    def of(cls, statement: Executable, keys: tuple[str, ...], dialect: Any) -> _Compiled:
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))  # type: ignore[attr-defined]
        names = tuple(compiled.positiontup or ())
        processors = (compiled.binds[name].type.bind_processor(dialect) for name in names)
        convert = tuple((i, p) for i, p in enumerate(processors) if p is not None)
        return cls(statement, str(compiled), _picker(names), convert, dict(compiled.params))

    def row(self, params: Mapping[str, Any]) -> tuple[Any, ...] | list[Any]:
        values = self.pick({**self.built_in, **params} if self.built_in else params)
        if not self.convert:
            return values
        converted = list(values)
        for position, convert in self.convert:
            converted[position] = convert(converted[position])
        return converted


def _picker(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """``itemgetter`` that always returns a tuple (it returns a bare value for one name)."""
    if len(names) == 1:
        only = names[0]
        return lambda params: (params[only],)
    if not names:
        return lambda params: ()
    getter = operator.itemgetter(*names)
    return getter


class AsyncCommitter:
    """Transactions on an asynchronous engine, on an event loop of its own thread."""

    def __init__(self, engine: Callable[[], AsyncEngine]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="hermes-store-writer", daemon=True
        )
        self._thread.start()
        self._engine = engine()

    async def commit(self, writes: list[Write]) -> int:
        done: Future[int] = asyncio.run_coroutine_threadsafe(self._commit(writes), self._loop)
        return await asyncio.wrap_future(done)

    async def _commit(self, writes: list[Write]) -> int:
        try:
            async with self._engine.begin() as conn:
                for statement, params in grouped(writes):
                    await conn.execute(statement, params)
        except Exception:  # the database's refusal, or a value its encoders cannot write
            return await self._one_by_one(writes)
        return 0

    async def _one_by_one(self, writes: list[Write]) -> int:
        # One bad write must not cost the others.
        async def write_alone(write: Write) -> None:
            statement, params, _phase = write
            async with self._engine.begin() as conn:
                await conn.execute(statement, params)

        failures = 0
        ordered = sorted(writes, key=_phase_of)
        for index, write in enumerate(ordered):
            try:
                await write_alone(write)
            except Exception as exc:
                _hold_if_full(exc, ordered, index, failures)
                cleaned = _cleaned(write)
                try:
                    if cleaned is None:
                        raise
                    await write_alone(cleaned)
                except Exception as again:
                    _hold_if_full(again, ordered, index, failures)
                    failures += 1
                    _log_failure(exc)
                else:
                    _log_cleaned()
        return failures

    async def close(self) -> None:
        if self._thread.is_alive():
            disposed = asyncio.run_coroutine_threadsafe(self._engine.dispose(), self._loop)
            await asyncio.wrap_future(disposed)
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join, 5)
            self._loop.close()


def _phase_of(write: Write) -> Phase:
    return write[2]


def _hold_if_full(exc: BaseException, ordered: list[Write], index: int, failures: int) -> None:
    """Raise :class:`WritesHeld` for ``ordered[index:]`` when ``exc`` says the disk is full:
    that write would succeed once space is freed, and the writes after it may depend on it
    (a message before the run's ending, the ending before the lock's release)."""
    if disk_full(exc):
        raise WritesHeld(ordered[index:], failures) from exc


def _cleaned(write: Write) -> Write | None:
    """The write with its unstorable text replaced, or None when it holds none."""
    statement, params, phase = write
    if not holds_unstorable(params):
        return None
    return statement, storable(params), phase


def _log_failure(exc: BaseException) -> None:
    log.error("a store write failed: %s", type(exc).__name__, exc_info=exc)


def _log_cleaned() -> None:
    log.warning(
        "a store write held text no database can hold (NUL or a lone surrogate); "
        "stored with U+FFFD in its place"
    )


def grouped(writes: list[Write]) -> Statements:
    """By phase, then by statement (in order of first use), each statement's writes in order:
    one ``executemany`` per statement and phase however the runs' writes interleaved.

    A statement written without parameters (say, "index what is new") runs once per batch
    however many writes asked for it."""
    first_use: dict[int, int] = {}
    ordered = sorted(
        writes, key=lambda write: (write[2], first_use.setdefault(id(write[0]), len(first_use)))
    )
    statements: Statements = []
    for statement, params, _phase in ordered:
        if statements and statements[-1][0] is statement:
            if params:
                statements[-1][1].append(params)
        else:
            statements.append((statement, [params]))
    return statements
