"""A replica that cannot reach Redis refuses what needs it with a 503 to retry soon, not a 500:
a new run cannot be counted against its key's limit on every replica, and a stop of a run it
does not hold cannot be passed to the replica that does. Redis back, both work again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from hermes_core.events import InterruptSource
from hermes_core.persistence import Store
from hermes_core.persistence.database import sqlite_url
from hermes_core.providers.retry import Cooldowns
from hermes_core.providers.scripted import ScriptedProvider
from server.errors import install_error_handlers
from server.http.auth import Principal
from server.profiles import Profile
from server.replicas.cluster import Cluster
from server.routes.runs import _logged_run
from server.services import Services
from tests.server.test_replicas_redis_away import Link, link  # noqa: F401  (the fixture)

OWNER = "alice"


async def _nobody() -> set[str]:
    return set()


async def _recover_none(_instance: str) -> int:
    return 0


@pytest.fixture
async def services(
    link: tuple[Link, str],  # noqa: F811 (the fixture)
    tmp_path: object,
) -> AsyncIterator[Services]:
    """A replica's services whose link to Redis runs through ``link``, which the test cuts."""
    _, through_relay = link
    cluster = Cluster(through_relay, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=30)
    await cluster.start(
        on_stop=lambda *_: None,
        recover=_recover_none,
        live_instances=_nobody,
        live_runs=list,
        cooldowns=Cooldowns(),
    )
    store = await Store.open(sqlite_url(f"{tmp_path}/hermes.db"), instance=cluster.instance)
    profile = Profile(id="hermes-agent", provider=ScriptedProvider("unused"))
    opened = Services(profiles=[profile], cluster=cluster, store=store)
    try:
        yield opened
    finally:
        await cluster.close()
        await store.close()


def _app(services: Services) -> FastAPI:
    """The two routes' Redis steps, answered as the server answers errors."""
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/runs")
    async def new_run() -> dict[str, str]:
        run_id = f"run_{uuid.uuid4().hex}"
        await services.reserve_run(OWNER, run_id)
        return {"id": run_id}

    @app.post("/v1/runs/{run_id}/stop")
    async def stop(run_id: str) -> dict[str, str | None]:
        return {"id": await services.stop_anywhere(run_id, OWNER, InterruptSource.STOP_API)}

    @app.get("/v1/runs/{run_id}/events")
    async def events(run_id: str) -> dict[str, bool]:
        # What a stream resumed through this replica reads first: is the run logged?
        return {"logged": await _logged_run(services, Principal(OWNER), run_id, 0) is not None}

    return app


def _assert_retry_soon(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == "5"
    error = answer.json()["error"]
    assert error["type"] == "server_error"
    assert error["code"] == "redis_unavailable"
    assert error["message"]


async def test_new_runs_and_stops_while_redis_is_away_are_503s_to_retry_soon(
    services: Services,
    link: tuple[Link, str],  # noqa: F811 (the fixture)
) -> None:
    relay, _ = link
    transport = httpx.ASGITransport(app=_app(services), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://replica") as http:
        assert (await http.post("/v1/runs")).status_code == 200  # Redis there: counted

        assert services.store is not None
        services.store.runs.started(
            run_id="run_logged",
            owner=OWNER,
            endpoint="runs",
            model="hermes-agent",
            session_id=None,
            completion_id=None,
            created_at=0.0,
        )
        await services.store.db.writer.flush()

        await relay.cut()
        _assert_retry_soon(await http.post("/v1/runs"))
        _assert_retry_soon(await http.post("/v1/runs/run_elsewhere/stop"))
        _assert_retry_soon(await http.get("/v1/runs/run_logged/events"))

        await relay.join()
        assert (await http.post("/v1/runs")).status_code == 200
        stopped = await http.post("/v1/runs/run_elsewhere/stop")
        assert stopped.status_code == 200, stopped.text
        assert stopped.json() == {"id": None}  # no replica runs it
