"""A ``previous_response_id`` chain whose last response was cut off by a server kill: once the
server is back, continuing from that failed response continues the whole chain (the model sees
every earlier turn), as continuing from a response that failed any other way does."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command

pytestmark = pytest.mark.slow  # starts server processes

KEY = "sk-chain-restart-0123456789"
MODEL = "chain-restart-upstream"


def _config(directory: Path, simulator: SimulatorServer) -> Path:
    config = directory / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}]
providers:
  - {{name: sim, model: {MODEL}, base_url: "{simulator.base_url}/v1", api_mode: chat_completions}}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    )
    return config


async def _upstream_calls(simulator: SimulatorServer, count: int) -> None:
    deadline = time.monotonic() + 20
    while len(simulator.state.requests(scenario=MODEL)) < count:
        assert time.monotonic() < deadline, "the upstream was never called"
        await asyncio.sleep(0.05)


async def _db_upgrade(config: Path, env: dict[str, str]) -> None:
    upgrade = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)),
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert await upgrade.wait() == 0


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m["role"] != "system"]


async def test_continuing_a_response_cut_off_by_a_restart_keeps_the_whole_chain(
    simulator: SimulatorServer, database_url: str, tmp_path: Path
) -> None:
    simulator.state.script(
        MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(text="Paris.")),
                Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60)),
                Step(reply=Reply(text="Lyon.")),
            ]
        ),
    )
    config = _config(tmp_path, simulator)
    env = {"DATABASE_URL": database_url, "HERMES_DATA_DIR": str(tmp_path / "data")}
    await _db_upgrade(config, env)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    auth = {"authorization": f"Bearer {KEY}"}
    with hermes_command("serve", "--config", str(config), port=port, env=env) as server:
        async with httpx.AsyncClient(
            verify=TLS_UNUSED, base_url=base, timeout=30, headers=auth
        ) as http:
            first = await http.post(
                "/v1/responses", json={"model": "hermes-agent", "input": "Capital of France?"}
            )
            assert first.status_code == 200, first.text
            second = await http.post(
                "/v1/responses",
                json={
                    "model": "hermes-agent",
                    "input": "And its second city?",
                    "previous_response_id": first.json()["id"],
                    "background": True,
                },
            )
            assert second.status_code == 200, second.text
            await _upstream_calls(simulator, 2)
            server.send_signal(signal.SIGKILL)
            server.wait(timeout=10)
    with hermes_command("serve", "--config", str(config), port=port, env=env):
        async with httpx.AsyncClient(
            verify=TLS_UNUSED, base_url=base, timeout=30, headers=auth
        ) as http:
            cut = (await http.get(f"/v1/responses/{second.json()['id']}")).json()
            assert cut["status"] == "failed"
            third = await http.post(
                "/v1/responses",
                json={
                    "model": "hermes-agent",
                    "input": "Try again, please.",
                    "previous_response_id": cut["id"],
                },
            )
            assert third.status_code == 200, third.text
    sent = simulator.state.requests(scenario=MODEL)[-1].body["messages"]
    assert _texts(sent) == [
        "Capital of France?",
        "Paris.",
        "And its second city?\n\nTry again, please.",
    ]
