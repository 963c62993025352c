"""A run this replica refuses after the other replicas counted it (it began draining, or
filled up, while the turn waited) is counted out again at once: its reservation, kept, would
have other replicas refuse the key with a 429 until it lapsed, a lease later."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from hermes_core.agent import Agent, AgentRequest
from hermes_core.events import AgentEvent, InterruptSource
from hermes_core.providers.retry import Cooldowns
from hermes_core.providers.scripted import ScriptedProvider
from server.errors import RunLimitExceeded, ServerDraining
from server.http.auth import Principal
from server.profiles import Profile
from server.replicas.cluster import Cluster
from server.runs.manager import RunManager
from server.services import Services
from server.serving.common import start_run
from tests.redis_server import redis_url_or_skip

LEASE_SECONDS = 60.0
"""Long: a reservation kept by mistake outlives every wait of these tests."""


async def _nobody() -> set[str]:
    return set()


async def _recover_none(_instance: str) -> int:
    return 0


class Holding:
    """A run that holds its slot until it is interrupted."""

    def __init__(self) -> None:
        self._stopped = asyncio.Event()

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        await self._stopped.wait()

    def interrupt(
        self, reason: str = "", *, source: InterruptSource = InterruptSource.STOP_API
    ) -> None:
        self._stopped.set()


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[Cluster, Cluster]]:
    """This replica's link to Redis and another replica's."""
    url = redis_url_or_skip()
    clusters = [
        Cluster(url, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=LEASE_SECONDS)
        for _ in range(2)
    ]
    for cluster in clusters:
        await cluster.start(
            on_stop=lambda *_: None,
            recover=_recover_none,
            live_instances=_nobody,
            live_runs=list,
            cooldowns=Cooldowns(),
        )
    try:
        yield clusters[0], clusters[1]
    finally:
        for cluster in clusters:
            await cluster.close()


async def _released(cluster: Cluster, owner: str, run_id: str) -> bool:
    """Whether ``run_id``'s reservation is gone within 10 s (well inside a lease)."""
    deadline = time.monotonic() + 10
    while await cluster.reserved_run(owner, run_id) is not None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


@pytest.mark.parametrize("refusal", ["draining", "full"])
async def test_a_run_refused_after_its_reservation_lets_other_replicas_take_the_key_at_once(
    replicas: tuple[Cluster, Cluster], refusal: str
) -> None:
    here, elsewhere = replicas
    owner = f"alice-{uuid.uuid4().hex[:8]}"
    profile = Profile(id="hermes-agent", provider=ScriptedProvider("unused"))
    # The key's limit across replicas is one run; this replica is the one that refuses.
    runs = RunManager(max_runs=1, max_runs_per_owner=1)
    services = Services(profiles=[profile], runs=runs, cluster=here)
    if refusal == "draining":
        runs.draining = True
        expected: type[Exception] = ServerDraining
    else:  # another key's run holds this replica's last slot
        runs.start(
            Holding(), AgentRequest(user_message="hold"), owner="bob", endpoint="runs", model="m"
        )
        expected = RunLimitExceeded
    run_id = f"run_{uuid.uuid4().hex}"
    request = AgentRequest(user_message="go", run_id=run_id)

    with pytest.raises(expected):
        await start_run(
            services,
            Agent(profile.provider, owner=owner),
            request,
            principal=Principal(name=owner),
            profile=profile,
            endpoint="runs",
            completion_id="",
            session_id=None,
        )

    try:
        assert await _released(here, owner, run_id)
        assert await elsewhere.reserve(owner, f"run_{uuid.uuid4().hex}", limit=1)
    finally:
        await runs.shutdown()
