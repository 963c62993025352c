"""``serve --workers N``: N replicas of one machine behind one socket, on PostgreSQL and Redis;
refused, with the reason, on SQLite. SIGTERM drains every worker: no run is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.cli import EXIT_INVALID_CONFIG
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.databases import fresh_database
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.redis_server import redis_url_or_skip
from tests.server.served import sse_data

pytestmark = pytest.mark.slow

KEY = "sk-workers-0123456789"
UPSTREAM = "workers-upstream"
AUTH = {"authorization": f"Bearer {KEY}"}


def _config(tmp_path: Path, simulator: SimulatorServer) -> Path:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}]
  data_dir: {tmp_path / "data"}
providers:
  - name: sim
    model: {UPSTREAM}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    )
    return config


def test_more_than_one_worker_on_sqlite_is_refused_with_the_reason(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    serve = [sys.executable, "-m", "server.cli", "serve", "--workers", "2"]
    config = ["--config", str(_config(tmp_path, simulator)), "--port", str(free_port())]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    result = subprocess.run(
        [*serve, *config], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == EXIT_INVALID_CONFIG
    assert "needs PostgreSQL" in result.stderr


@pytest.fixture
async def postgres(tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database("postgresql", tmp_path) as url:
        yield url


def _workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children]


@pytest.mark.postgres
async def test_two_workers_serve_and_drain_on_sigterm_without_losing_a_run(
    simulator: SimulatorServer, tmp_path: Path, postgres: str
) -> None:
    reply = Reply(text="word " * 30, chunk_count=30)
    slow = Step(reply=reply, fault=Fault(chunk_delay=0.1), repeat=10)  # ~3 s each
    simulator.state.script(UPSTREAM, Scenario(steps=[slow]))
    config = _config(tmp_path, simulator)
    env = {"DATABASE_URL": postgres, "REDIS_URL": redis_url_or_skip()}
    upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
    await asyncio.to_thread(
        subprocess.run, upgrade, env={**os.environ, **env}, check=True, capture_output=True
    )
    port, log = free_port(), tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    serve = ("serve", "--config", str(config), "--workers", "2")
    with hermes_command(*serve, port=port, env=env, log=log) as parent:
        assert len(_workers_of(parent.pid)) == 2

        async def run(http: httpx.AsyncClient, started: asyncio.Event) -> list[dict[str, Any]]:
            async with http.stream("POST", f"{base}/v1/chat/completions", json=body) as stream:
                lines = stream.aiter_lines()
                async for line in lines:
                    if '"content":"word' in line.replace(" ", ""):
                        break
                started.set()
                return sse_data("\n".join([line async for line in lines]))

        # A client of its own per run: separate connections, so either worker may serve each.
        async with (
            httpx.AsyncClient(verify=TLS_UNUSED, headers=AUTH, timeout=60) as first,
            httpx.AsyncClient(verify=TLS_UNUSED, headers=AUTH, timeout=60) as second,
        ):
            began = [asyncio.Event(), asyncio.Event()]
            runs = [
                asyncio.create_task(run(first, began[0])),
                asyncio.create_task(run(second, began[1])),
            ]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in began)), 30)
            parent.send_signal(signal.SIGTERM)
            ended = await asyncio.wait_for(asyncio.gather(*runs), 60)
        assert [frames[-1]["hermes"]["exit_reason"] for frames in ended] == ["completed"] * 2
        assert await asyncio.to_thread(parent.wait, 60) == 0
