"""A replica whose link to Redis drops for a moment mid-run: what its runs logged meanwhile
reaches the log once Redis answers again, so that a stream resumed on another replica neither
skips those events nor waits for ever for an ending that was never sent."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit

import pytest

from hermes_core.events import AgentEvent, ExitReason, RunFinished, RunStarted, TextDelta
from hermes_core.providers.retry import Cooldowns
from hermes_core.usage import Usage
from server.replicas.cluster import Cluster
from tests.redis_server import redis_url_or_skip


class Link:
    """A TCP relay to Redis that can be cut (every connection dropped, new ones refused) and
    joined again on the same port: Redis away for a moment, as a replica sees it."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def join(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._pipes):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def close(self) -> None:
        if self._server is not None:
            await self.cut()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        to_reader, to_writer = await asyncio.open_connection(*self._target)
        self._pipes |= {writer, to_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while chunk := await source.read(65536):
                    sink.write(chunk)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, to_writer), pipe(to_reader, writer))
        self._pipes -= {writer, to_writer}


async def _nobody() -> set[str]:
    return set()


async def _recover_none(_instance: str) -> int:
    return 0


async def _cluster(url: str) -> Cluster:
    cluster = Cluster(url, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=30)
    await cluster.start(
        on_stop=lambda *_: None,
        recover=_recover_none,
        live_instances=_nobody,
        live_runs=list,
        cooldowns=Cooldowns(),
    )
    return cluster


@pytest.fixture
async def link() -> AsyncIterator[tuple[Link, str]]:
    real = redis_url_or_skip()
    parts = urlsplit(real)
    relay = Link(parts.hostname or "127.0.0.1", parts.port or 6379)
    await relay.join()
    yield relay, parts._replace(netloc=f"127.0.0.1:{relay.port}").geturl()
    await relay.close()


async def _eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    """Whether ``check`` holds within 30 s, asked every 20 ms."""
    deadline = time.monotonic() + 30
    while True:
        if await check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)


def _events(run_id: str) -> list[AgentEvent]:
    started = RunStarted(
        run_id=run_id, seq=0, task_id="task_1", model="m", provider="p", budget=3, streamed=True
    )
    words = [TextDelta(run_id=run_id, seq=seq, text=f"word{seq} ") for seq in range(1, 6)]
    finished = RunFinished(
        run_id=run_id,
        seq=6,
        exit_reason=ExitReason.COMPLETED,
        final_text="",
        partial=False,
        iterations=1,
        usage=Usage(),
        model_calls=1,
    )
    return [started, *words, finished]


async def test_events_logged_while_redis_was_away_reach_another_replica_once_it_is_back(
    link: tuple[Link, str], caplog: pytest.LogCaptureFixture
) -> None:
    relay, through_relay = link
    a = await _cluster(through_relay)
    b = await _cluster(redis_url_or_skip())
    run_id = f"run_{uuid.uuid4().hex}"
    events = _events(run_id)
    try:
        for event in events[:2]:
            a.record(event)

        assert await _eventually(lambda: b.has_events(run_id))

        await relay.cut()
        caplog.set_level(logging.WARNING, logger="hermes.cluster")
        for event in events[2:]:  # the rest of the run, its ending with it, while Redis is away
            a.record(event)

        async def flush_failed() -> bool:
            return "not sent" in caplog.text

        assert await _eventually(flush_failed)
        await relay.join()

        async with asyncio.timeout(30):
            replayed = [event async for event in b.events(run_id)]
        assert [event.seq for event in replayed] == list(range(len(events)))
        assert isinstance(replayed[-1], RunFinished)
    finally:
        await a.close()
        await b.close()
