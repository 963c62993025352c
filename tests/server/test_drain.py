"""Graceful shutdown of a real ``serve`` process: on SIGTERM ``/ready`` turns 503 and new runs
are refused at once, while the run in progress finishes; past ``drain_seconds`` a run still
going is interrupted and recorded as stopped by the shutdown, never lost."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store, sqlite_url
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.served import sse_data

pytestmark = pytest.mark.slow

KEY = "sk-drain-0123456789"
UPSTREAM = "drain-upstream"
AUTH = {"authorization": f"Bearer {KEY}"}
BODY = {"model": "hermes-agent", "stream": True, "messages": [{"role": "user", "content": "go"}]}


def _config(tmp_path: Path, simulator: SimulatorServer, drain_seconds: float) -> Path:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}]
  data_dir: {tmp_path / "data"}
  drain_seconds: {drain_seconds}
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


def _answer(simulator: SimulatorServer, chunks: int, delay: float) -> None:
    reply = Reply(text="word " * chunks, chunk_count=chunks)
    simulator.state.script(
        UPSTREAM, Scenario(steps=[Step(reply=reply, fault=Fault(chunk_delay=delay))])
    )


async def test_sigterm_drains_the_run_in_progress_and_refuses_new_ones(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    _answer(simulator, chunks=30, delay=0.1)  # about 3 s of answer
    config, port = _config(tmp_path, simulator, drain_seconds=60), free_port()
    base = f"http://127.0.0.1:{port}"
    with hermes_command("serve", "--config", str(config), port=port) as server:
        async with httpx.AsyncClient(
            verify=TLS_UNUSED, base_url=base, headers=AUTH, timeout=60
        ) as http:
            assert (await http.get("/ready")).status_code == 200
            async with http.stream("POST", "/v1/chat/completions", json=BODY) as stream:
                lines = stream.aiter_lines()
                async for line in lines:
                    if '"content":"word' in line.replace(" ", ""):
                        break
                server.send_signal(signal.SIGTERM)
                ready = await _until_status(http, "/ready", 503)
                assert ready.json()["error"]["code"] == "draining"
                refused = await http.post("/v1/chat/completions", json={**BODY, "stream": False})
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "server_draining"
                assert refused.headers["retry-after"] == "5"
                rest = sse_data("\n".join([line async for line in lines]))
        assert rest[-1]["hermes"]["exit_reason"] == "completed"
        # uvicorn re-raises the signal it handled once it has shut down: the exit says SIGTERM.
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)


async def test_a_run_longer_than_the_drain_is_interrupted_and_recorded(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    _answer(simulator, chunks=600, delay=0.1)  # a minute of answer
    config, port = _config(tmp_path, simulator, drain_seconds=1), free_port()
    base = f"http://127.0.0.1:{port}"
    with hermes_command("serve", "--config", str(config), port=port) as server:
        async with (
            httpx.AsyncClient(verify=TLS_UNUSED, base_url=base, headers=AUTH, timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=BODY) as stream,
        ):
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()
            async for line in lines:
                if '"content":"word' in line.replace(" ", ""):
                    break
            started = time.monotonic()
            server.send_signal(signal.SIGTERM)
            rest = sse_data("\n".join([line async for line in lines]))
        assert rest[-1]["hermes"]["exit_reason"] == "interrupted"
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 20
    store = await Store.open(sqlite_url(tmp_path / "data" / "hermes.db"), migrate=False)
    try:
        record: Any = await store.runs.get("alice", run_id)
    finally:
        await store.close()
    assert (record.status, record.exit_reason) == ("interrupted", "interrupted")


async def _until_status(http: httpx.AsyncClient, path: str, status: int) -> httpx.Response:
    deadline = time.monotonic() + 15
    while True:
        response = await http.get(path)
        if response.status_code == status or time.monotonic() > deadline:
            return response
        await asyncio.sleep(0.05)
