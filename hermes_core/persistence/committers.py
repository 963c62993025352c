"""The committers: how a batch of queued writes becomes transactions (see
:mod:`~hermes_core.persistence.writer` for the queue that hands them over).

The commits run on a thread of their own. A commit talks to the driver several times, and on
the server's event loop each of those turns would queue behind every request in progress (a
commit then takes a hundred times longer under load, and every run waits on it). The loop
hands a batch over and awaits one future. On PostgreSQL the thread runs an asyncpg engine on
an event loop of its own. On SQLite it uses the plain ``sqlite3`` driver, and hands it each
statement compiled once by SQLAlchemy: the Python that SQLAlchemy runs per execution costs
more CPU than SQLite's own work for these small writes, and it holds the GIL the server's
event loop needs (measured: ~1 ms of writer CPU per run, and the loop's socket calls slowed by
waiting for the GIL).

A write the database refuses for lack of space ends the batch with :class:`WritesHeld`; any
other refused write is retried once with its unstorable text replaced, then counted lost.
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
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from sqlalchemy import JSON, Null
from sqlalchemy.dialects.sqlite.pysqlite import dialect as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql import Executable
from sqlalchemy.types import TypeEngine

from hermes_core import json_codec
from hermes_core.persistence.disk_full import disk_full
from hermes_core.persistence.storable import holds_unstorable, storable
from hermes_core.persistence.writer import Phase, Statements, Write, WritesHeld

# The writer's logger, as before the committers had a module of their own: its messages are
# the store writer's, and log filters (and the tests) name that logger.
log = logging.getLogger("hermes_core.persistence.writer")
T = TypeVar("T")


class SqliteCommitter:
    """Transactions on a SQLite file through one ``sqlite3`` connection of the writer's own
    thread; each statement runs through the driver's ``executemany`` with its SQL compiled
    once by SQLAlchemy."""

    def __init__(self, path: str, *, setup: Callable[[sqlite3.Connection], None]) -> None:
        self._path = path
        self._setup = setup
        self._dialect = sqlite_dialect(json_serializer=json_codec.dumps_text)
        self._thread = _JobThread("hermes-store-writer")
        _bind_none_and_bool_directly()
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


def _bind_none_and_bool_directly() -> None:
    """Give ``sqlite3`` an adapter for None and for bools, which bind as they did without one
    (NULL, and 0 or 1).

    The driver binds ints, floats and strings as they are, but looks every other value up in
    its adapter registry first; on a miss it asks the protocol type for ``__adapt__``, whose
    AttributeError formats a message. A run's rows hold a dozen None and bool values, and
    that lookup was an eighth of the writer thread's instructions. The registry is the
    process's: the same two no-op adapters serve every connection, SQLAlchemy's included.
    ``{}.get`` returns None for any key without a Python frame; ``int`` maps a bool to 0/1."""
    nothing: dict[object, None] = {}
    sqlite3.register_adapter(type(None), nothing.get)
    sqlite3.register_adapter(bool, int)


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
        processors = (_bind_processor(compiled.binds[name].type, dialect) for name in names)
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


def _bind_processor(kind: TypeEngine[Any], dialect: Any) -> Callable[[Any], Any] | None:
    """The column type's conversion of a bound value; for JSON, :func:`_json_text` instead of
    SQLAlchemy's, which reaches orjson through three Python calls per value (a run binds
    eight)."""
    if isinstance(kind, JSON) and not kind.none_as_null:
        return _json_text
    return kind.bind_processor(dialect)


def _json_text(value: Any) -> str | None:
    """What SQLAlchemy's JSON type binds with ``json_codec.dumps_text`` as its serializer
    (its NULL sentinel is JSON null, SQL's ``null()`` stays NULL; a test holds them equal)."""
    if value is JSON.NULL:
        value = None
    elif isinstance(value, Null):
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # what orjson refuses (json_codec says which), through json_codec
        return json_codec.dumps_text(value)


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
    # Gathered in one pass, then only the few groups sorted (stably, by phase: first use
    # stays the order within one); not every write with a key of its own.
    groups: dict[tuple[Phase, int], tuple[Executable, list[Mapping[str, Any]]]] = {}
    for statement, params, phase in writes:
        group = groups.get((phase, id(statement)))
        if group is None:
            groups[(phase, id(statement))] = (statement, [params])
        elif params:
            group[1].append(params)
    return [groups[key] for key in sorted(groups, key=operator.itemgetter(0))]
