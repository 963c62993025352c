"""Two replicas' links to one real Redis, in process: reservations hold a key's limit across
them, a run's log is replayed by the other, its release goes with its last entry, a stop
crosses over, and a Redis that is away refuses a reservation rather than hanging it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from hermes_core.events import AgentEvent, ExitReason, RunFinished, RunStarted, TextDelta
from hermes_core.providers.retry import Cooldowns
from hermes_core.usage import Usage
from server.replicas.cluster import Cluster
from server.replicas.liveness import Liveness
from server.replicas.reservations import RUNS_KEY
from server.replicas.run_writes import RunWrites
from tests.redis_server import redis_url_or_skip

Stops = list[tuple[str, str, str]]


async def _no_instances() -> set[str]:
    return set()


async def _recover_none(_instance: str) -> int:
    return 0


@pytest.fixture
def redis_url() -> str:
    return redis_url_or_skip()


class Links:
    """Replicas' links to one Redis, started as ``serve`` starts them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.started: list[Cluster] = []

    async def start(
        self, stops: Stops | None = None, forgotten: list[list[str]] | None = None
    ) -> Cluster:
        """A replica's link; the stops it is asked for go to ``stops``, the runs it is told
        to forget to ``forgotten``."""
        cluster = Cluster(self.url, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=5)
        into = stops if stops is not None else []
        told = forgotten if forgotten is not None else []
        await cluster.start(
            on_stop=lambda *stop: into.append(stop),
            recover=_recover_none,
            live_instances=_no_instances,
            live_runs=list,
            cooldowns=Cooldowns(),
            on_forget=told.append,
        )
        self.started.append(cluster)
        return cluster


@pytest.fixture
async def links(redis_url: str) -> AsyncIterator[Links]:
    made = Links(redis_url)
    yield made
    for cluster in made.started:
        await cluster.close()


def _run(run_id: str) -> list[AgentEvent]:
    started = RunStarted(
        run_id=run_id, seq=0, task_id="task_1", model="m", provider="p", budget=3, streamed=True
    )
    words = [TextDelta(run_id=run_id, seq=seq, text=f"word{seq} ") for seq in range(1, 4)]
    finished = RunFinished(
        run_id=run_id,
        seq=4,
        exit_reason=ExitReason.COMPLETED,
        final_text="word1 word2 word3 ",
        partial=False,
        iterations=1,
        usage=Usage(),
        model_calls=1,
    )
    return [started, *words, finished]


async def _eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    """Whether ``check`` holds within 30 s, asked every 20 ms."""
    deadline = time.monotonic() + 30
    while True:
        if await check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)


async def _replayed(cluster: Cluster, run_id: str, after: int = -1) -> list[AgentEvent]:
    async with asyncio.timeout(30):
        return [event async for event in cluster.events(run_id, after=after)]


async def test_a_key_at_its_limit_on_one_replica_is_refused_on_another_until_a_run_ends(
    links: Links,
) -> None:
    a, b = await links.start(), await links.start()
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    assert await a.reserve(owner, "run_1", 2)
    assert await b.reserve(owner, "run_2", 2)
    assert not await b.reserve(owner, "run_3", 2)
    await a.release(owner, "run_1")  # sent with A's next writes, within milliseconds
    assert await _eventually(lambda: b.reserve(owner, "run_3", 2))


async def test_reservations_made_at_once_on_two_replicas_never_pass_the_limit(
    links: Links,
) -> None:
    a, b = await links.start(), await links.start()
    owner = f"owner-{uuid.uuid4().hex[:8]}"
    asked = [(a if n % 2 else b).reserve(owner, f"run_{n}", 3) for n in range(12)]
    answers = await asyncio.gather(*asked)
    assert answers.count(True) == 3


async def test_a_run_logged_on_one_replica_is_replayed_on_another_from_any_point(
    links: Links,
) -> None:
    a, b = await links.start(), await links.start()
    run_id = f"run_{uuid.uuid4().hex}"
    events = _run(run_id)
    for event in events[:2]:
        a.record(event)
    live = asyncio.ensure_future(_replayed(b, run_id))  # reading while the run goes on
    await asyncio.sleep(0.05)
    for event in events[2:]:
        a.record(event)
    assert await live == events
    assert await b.has_events(run_id)
    assert await _replayed(b, run_id, after=2) == events[3:]


async def test_a_run_s_reservation_is_gone_once_its_last_entry_can_be_read(
    links: Links, redis_url: str
) -> None:
    a, b = await links.start(), await links.start()
    owner, run_id = f"owner-{uuid.uuid4().hex[:8]}", f"run_{uuid.uuid4().hex}"
    assert await a.reserve(owner, run_id, 5)
    for event in _run(run_id):
        a.record(event)
    await a.release(owner, run_id)  # as the run's observer does on its ending
    assert (await _replayed(b, run_id))[-1].kind == "run_finished"
    redis = aioredis.from_url(redis_url)
    try:
        assert await redis.zscore(RUNS_KEY.format(owner), run_id) is None
    finally:
        await redis.aclose()


async def test_a_stop_asked_of_one_replica_reaches_the_others(
    links: Links,
) -> None:
    b_stops: Stops = []
    a = await links.start()
    await links.start(b_stops)
    await a.request_stop("run_9", "alice", "stop_api")

    async def heard() -> bool:
        return bool(b_stops)

    assert await _eventually(heard)
    assert b_stops == [("run_9", "alice", "stop_api")]


async def test_erased_runs_are_forgotten_by_every_replica_and_their_logs_go(
    links: Links,
) -> None:
    b_forgot: list[list[str]] = []
    a = await links.start()
    b = await links.start(forgotten=b_forgot)
    run_id = f"run_{uuid.uuid4().hex}"
    for event in _run(run_id):
        a.record(event)
    assert (await _replayed(b, run_id))[-1].kind == "run_finished"

    await a.forget_runs([run_id])

    async def heard() -> bool:
        return bool(b_forgot)

    assert await _eventually(heard)
    assert b_forgot == [[run_id]]
    assert not await b.has_events(run_id)


async def test_a_reservation_fails_rather_than_waits_when_redis_is_away() -> None:
    unreachable = aioredis.from_url("redis://127.0.0.1:1/0")
    writes = RunWrites(unreachable, lease_seconds=5)
    sending = asyncio.create_task(writes.send_forever())
    try:
        async with asyncio.timeout(30):
            with pytest.raises(aioredis.ConnectionError):
                await writes.reserve(RUNS_KEY.format("alice"), 1, "run_1")
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        await unreachable.aclose()


async def test_a_reservation_waiting_when_the_link_closes_fails_rather_than_hangs(
    redis_url: str,
) -> None:
    redis = aioredis.from_url(redis_url)
    writes = RunWrites(redis, lease_seconds=5)
    answer = writes.reserve(RUNS_KEY.format("alice"), 1, "run_1")  # queued: nothing sends it
    writes.close()
    try:
        with pytest.raises(ConnectionError):
            await answer
        with pytest.raises(ConnectionError):
            writes.reserve(RUNS_KEY.format("alice"), 1, "run_2")
    finally:
        await redis.aclose()


async def test_a_replica_cut_from_redis_for_a_lease_stops_its_runs() -> None:
    """The others will declare it dead once its lease lapses: it must not go on with runs they
    have taken over, nor wait for Redis to come back to find out."""
    unreachable = aioredis.from_url("redis://127.0.0.1:1/0")
    liveness = Liveness(unreachable, instance="cut-off", lease_seconds=0.3)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    began = loop.time()
    at: list[float] = []

    async def nothing_else() -> None:
        return None

    def lapsed() -> None:
        at.append(loop.time())
        stopped.set()

    keeping = asyncio.create_task(liveness.keep_lease(nothing_else, lapsed))
    try:
        async with asyncio.timeout(30):
            await stopped.wait()
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await unreachable.aclose()
    assert at[0] - began >= 0.3  # not before a whole lease without renewing
