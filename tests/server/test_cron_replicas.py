"""A cron on three ``serve`` replicas sharing one PostgreSQL and one Redis: every firing is
fired by exactly one replica, one replica killed while its firing's run is going on is not
fired again (its run is closed by another replica, as crash recovery would), the others go on
firing, and every firing's run is listed in ``GET /v1/runs`` with the cron's id."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store
from hermes_core.persistence.crons import Firing
from server.crons.scheduler import CRON_ID_KEY
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.databases import fresh_database
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command, wait_until_healthy
from tests.redis_server import redis_url_or_skip
from tests.server.served import pid_alive, until

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

UPSTREAM = f"cron-replicas-{uuid.uuid4().hex[:8]}"
LEASE_SECONDS = 2
KEY = f"sk-cron-replicas-{uuid.uuid4().hex}"
OWNER = f"alice-{uuid.uuid4().hex[:8]}"
AUTH = {"authorization": f"Bearer {KEY}"}


@dataclass
class Replica:
    name: str
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path
    instance: str

    def alive(self) -> bool:
        return pid_alive(self.process.pid) and self.process.poll() is None


@pytest.fixture
async def postgres(tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def replicas(
    postgres: str, simulator: SimulatorServer, tmp_path: Path
) -> Iterator[dict[str, Replica]]:
    """Replicas A, B and C of one deployment (each its own data dir, so its own instance)."""
    redis = redis_url_or_skip()
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: {OWNER}, key: {KEY}}}]
providers:
  - name: sim
    model: {UPSTREAM}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    )
    common = {
        "DATABASE_URL": postgres,
        "REDIS_URL": redis,
        "HERMES_LEASE_SECONDS": str(LEASE_SECONDS),
        "HERMES_SHARED_DIR": str(tmp_path / "shared"),
    }
    upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
    subprocess.run(upgrade, env={**os.environ, **common}, check=True, capture_output=True)
    with ExitStack() as stack:
        started = {}
        for name in "ABC":
            port, log, data = (
                free_port(),
                tmp_path / f"replica-{name}.log",
                tmp_path / f"data-{name}",
            )
            env = {**common, "HERMES_DATA_DIR": str(data)}
            serve = ("serve", "--config", str(config))
            process = stack.enter_context(
                hermes_command(*serve, port=port, env=env, log=log, wait=False)
            )
            started[name] = Replica(name, f"http://127.0.0.1:{port}", process, log, "")
        for name, replica in started.items():
            wait_until_healthy(replica.base_url, process=replica.process, timeout=60)
            replica.instance = (tmp_path / f"data-{name}" / "instance").read_text().strip()
        yield started


async def _firings(postgres: str, cron_id: str) -> list[Firing]:
    store = await Store.open(postgres, migrate=False)
    try:
        return await store.crons.firings(OWNER, cron_id, limit=1000)
    finally:
        await store.close()


async def test_a_cron_fires_once_per_time_across_replicas_one_killed_during_a_firing(
    replicas: dict[str, Replica], simulator: SimulatorServer, postgres: str
) -> None:
    # The first firing's run hangs in its model call (a minute): the replica running it is
    # killed then. Every later run answers at once.
    hang = Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60))
    quick = [Step(reply=Reply(text="Tick.")) for _ in range(200)]
    simulator.state.script(UPSTREAM, Scenario(steps=[hang, *quick]))
    a = replicas["A"]
    by_instance = {r.instance: r for r in replicas.values()}
    body = {
        "schedule": "* * * * * *",
        "model": "hermes-agent",
        "input": "Tick.",
        "metadata": {"job": "every-second"},
    }
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=AUTH, timeout=60) as http:
        made = await http.post(f"{a.base_url}/v1/crons", json=body)
        assert made.status_code == 200, made.text
        cron_id = made.json()["id"]

        async def first_started() -> bool:
            started = [f for f in await _firings(postgres, cron_id) if f.run_id]
            return bool(started) and len(simulator.state.requests(scenario=UPSTREAM)) >= 1

        assert await until(first_started, server=a)
        first = min((f for f in await _firings(postgres, cron_id) if f.run_id), key=_time)
        assert first.claimed_by is not None
        victim = by_instance[first.claimed_by]
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        killed_at = time.time()
        survivor = next(r for r in replicas.values() if r.alive())

        async def fired_after_the_kill() -> bool:
            later = [f for f in await _firings(postgres, cron_id) if f.created_at > killed_at]
            return len(later) >= 3

        assert await until(fired_after_the_kill, server=survivor)
        paused = await http.post(f"{survivor.base_url}/v1/crons/{cron_id}/pause")
        assert paused.status_code == 200, paused.text

        async def all_settled() -> bool:
            return all(f.status != "claimed" for f in await _firings(postgres, cron_id))

        assert await until(all_settled, server=survivor)
        firings = await _firings(postgres, cron_id)
        times = [f.scheduled_at for f in firings]
        assert len(times) == len(set(times))  # never two firings of one time
        assert all(f.status == "started" and f.run_id for f in firings), firings
        # Both other replicas fired some, after the kill (whoever won each claim).
        assert {f.claimed_by for f in firings if f.created_at > killed_at} <= {
            r.instance for r in replicas.values() if r is not victim
        }

        async def listed() -> dict[str, dict[str, Any]]:
            runs: dict[str, dict[str, Any]] = {}
            after = None
            while True:
                params: dict[str, Any] = {"limit": 100, **({"after": after} if after else {})}
                page = (await http.get(f"{survivor.base_url}/v1/runs", params=params)).json()
                for run in page["data"]:
                    if (run["metadata"] or {}).get(CRON_ID_KEY) == cron_id:
                        runs[run["id"]] = run
                if not page["has_more"]:
                    return runs
                after = page["last_id"]

        runs = await listed()
        # Exactly one run per firing: none fired twice, none lost.
        assert set(runs) == {f.run_id for f in firings}

        async def killed_run_closed() -> bool:
            run = (await http.get(f"{survivor.base_url}/v1/runs/{first.run_id}")).json()
            return bool(run.get("status") == "interrupted")

        assert await until(killed_run_closed, server=survivor)


def _time(firing: Firing) -> float:
    return firing.scheduled_at


async def test_a_firing_claimed_by_a_replica_killed_before_its_run_started_is_retaken_once(
    replicas: dict[str, Replica], simulator: SimulatorServer, postgres: str
) -> None:
    # Every run continues one session. The first run hangs holding it, so the next firings are
    # claimed and wait for the session: claimed, their run not started (the window). A replica
    # holding such a claim is killed; once the first run is stopped, its claims are retaken
    # by the others after the lease and each started once.
    hang = Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60))
    quick = [Step(reply=Reply(text="Tick.")) for _ in range(200)]
    simulator.state.script(UPSTREAM, Scenario(steps=[hang, *quick]))
    a = replicas["A"]
    by_instance = {r.instance: r for r in replicas.values()}
    body = {"schedule": "* * * * * *", "model": "hermes-agent", "input": "Tick.", "session": "one"}
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=AUTH, timeout=60) as http:
        made = await http.post(f"{a.base_url}/v1/crons", json=body)
        assert made.status_code == 200, made.text
        cron_id = made.json()["id"]

        async def holder() -> Firing | None:
            started = [f for f in await _firings(postgres, cron_id) if f.run_id]
            return started[0] if started else None

        async def waiting_elsewhere() -> bool:
            first = await holder()
            return first is not None and any(
                f.status == "claimed" and f.claimed_by != first.claimed_by
                for f in await _firings(postgres, cron_id)
            )

        assert await until(waiting_elsewhere, server=a)
        first = await holder()
        assert first is not None
        paused = await http.post(f"{a.base_url}/v1/crons/{cron_id}/pause")
        assert paused.status_code == 200, paused.text
        waiting = [
            f
            for f in await _firings(postgres, cron_id)
            if f.status == "claimed" and f.claimed_by != first.claimed_by
        ]
        victim = by_instance[str(waiting[0].claimed_by)]
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait(timeout=10)
        orphans = {
            f.id
            for f in await _firings(postgres, cron_id)
            if f.claimed_by == victim.instance and not f.run_id
        }
        assert orphans
        survivor = next(r for r in replicas.values() if r.alive())
        stopped = await http.post(f"{survivor.base_url}/v1/runs/{first.run_id}/stop")
        assert stopped.status_code == 202, stopped.text

        async def all_started() -> bool:
            return all(f.run_id for f in await _firings(postgres, cron_id))

        settled = await until(all_started, server=survivor, seconds=60)
        firings = await _firings(postgres, cron_id)
        assert settled, [(f.id, f.status, f.claimed_by, f.run_id, f.error) for f in firings]
        retaken = [f for f in firings if f.id in orphans]
        assert all(f.claimed_by != victim.instance for f in retaken), retaken
        run_ids = [f.run_id for f in firings]
        assert len(run_ids) == len(set(run_ids))
        listed = (await http.get(f"{survivor.base_url}/v1/runs", params={"limit": 100})).json()
        mine = {
            r["id"] for r in listed["data"] if (r["metadata"] or {}).get(CRON_ID_KEY) == cron_id
        }
        assert mine == set(run_ids)
