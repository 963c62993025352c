"""``serve --workers N`` and instance names held by live processes: the parent refuses to
start, once, with the same one line as a single replica (exit 2), when a name one of its
workers would take (``<instance>.w<i>``) is held live; and a worker that finds its name held
when it is started again stops the whole server with that line, rather than being started
again and again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from server.cli import EXIT_INVALID_CONFIG
from server.replicas.liveness import Liveness
from server.simulator import SimulatorServer
from tests.databases import fresh_database
from tests.processes import free_port, hermes_command
from tests.redis_server import redis_url_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

KEY = "sk-workers-names-0123456789"
LEASE_SECONDS = 2.0


@pytest.fixture
async def redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url_or_skip())
    yield client
    await client.aclose()


@pytest.fixture
async def env(tmp_path: Path, simulator: SimulatorServer) -> AsyncIterator[dict[str, str]]:
    """A deployment's environment: PostgreSQL (migrated), Redis, a configuration and an
    instance name of its own."""
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}]
  data_dir: {tmp_path / "data"}
  lease_seconds: {LEASE_SECONDS}
providers:
  - name: sim
    model: workers-names-upstream
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    )
    async with fresh_database("postgresql", tmp_path) as url:
        env = {
            "DATABASE_URL": url,
            "REDIS_URL": redis_url_or_skip(),
            "HERMES_CONFIG": str(config),
            "HERMES_INSTANCE": f"inst_{uuid.uuid4().hex[:8]}",
        }
        upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade"]
        await asyncio.to_thread(
            subprocess.run, upgrade, env={**os.environ, **env}, check=True, capture_output=True
        )
        yield env


@asynccontextmanager
async def held_live(redis: aioredis.Redis, name: str) -> AsyncIterator[Liveness]:
    """``name``'s lease taken (over whoever held it) and renewed, as a live replica does."""
    live = Liveness(redis, instance=name, lease_seconds=LEASE_SECONDS)

    async def nothing_else() -> None:
        return None

    await live.renew(nothing_else)
    keeping = asyncio.create_task(live.keep_lease(nothing_else))
    try:
        yield live
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await live.give_back()


def _serve_workers_to_exit(env: dict[str, str]) -> tuple[int, str]:
    """``serve --workers 2`` to its exit (its exit code and output); one still running after a
    minute is killed, with its workers, and fails the test."""
    command = [sys.executable, "-m", "server.cli", "--log-level", "warning", "serve"]
    command += ["--workers", "2", "--port", str(free_port())]
    process = subprocess.Popen(
        command,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its workers in its process group: killed with it
    )
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"serve --workers 2 still running after a minute:\n{output}")
    return process.returncode, output


def _worker_pid(parent: int, index: int) -> int:
    for child in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        arguments = Path(f"/proc/{child}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        if arguments[-2:] == [b"--worker", str(index).encode()]:
            return int(child)
    raise AssertionError(f"no worker {index} under {parent}")


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie its parent has not reaped yet counts)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def test_workers_whose_name_is_held_live_refuse_to_start_once(
    env: dict[str, str], redis: aioredis.Redis
) -> None:
    second = f"{env['HERMES_INSTANCE']}.w2"
    async with held_live(redis, second) as live:
        code, output = await asyncio.to_thread(_serve_workers_to_exit, env)
        assert await redis.get(f"hermes:instance:{second}") == live.epoch.encode()
    assert code == EXIT_INVALID_CONFIG, output
    refusals = [line for line in output.splitlines() if "another live replica" in line]
    assert len(refusals) == 1, output
    assert second in refusals[0]
    assert "server.instance" in refusals[0]
    assert "Traceback" not in output  # refused before any worker started


async def test_a_worker_started_again_under_a_name_held_live_stops_the_server(
    env: dict[str, str], redis: aioredis.Redis, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    second = f"{env['HERMES_INSTANCE']}.w2"
    with hermes_command("serve", "--workers", "2", port=free_port(), env=env, log=log) as parent:
        worker = _worker_pid(parent.pid, 2)
        os.kill(worker, signal.SIGKILL)  # the parent starts it again after a pause
        deadline = time.monotonic() + 30
        while not _gone(worker):
            assert time.monotonic() < deadline, "worker 2 outlived its SIGKILL"
            await asyncio.sleep(0.02)
        async with held_live(redis, second):  # taken before worker 2 is back
            code = await asyncio.to_thread(parent.wait, 90)
    output = log.read_text()
    assert code == EXIT_INVALID_CONFIG, output
    assert output.count("worker 2 exited") == 1, output  # the SIGKILL: not started again since
    refusals = [line for line in output.splitlines() if "another live replica" in line]
    assert any(line.startswith("hermes-server:") and second in line for line in refusals)
