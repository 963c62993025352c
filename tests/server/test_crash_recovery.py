"""A server process killed with SIGKILL in the middle of a run, then started again: the run is
marked ``interrupted``, the transcript keeps everything saved before the kill and gets a
result for the tool call that was cut off, and the conversation can go on. On SQLite and on
PostgreSQL (whose schema the ``db upgrade`` command installs, as in production)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store
from server.sessions.service import INTERRUPTED_RESULT
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

KEY = "sk-crash-0123456789abcdef"
MODEL = "crash-upstream"


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


async def _wait_for_upstream_calls(simulator: SimulatorServer, count: int) -> None:
    deadline = time.monotonic() + 20
    while len(simulator.state.requests(scenario=MODEL)) < count:
        assert time.monotonic() < deadline, "the upstream was not called as often as expected"
        await asyncio.sleep(0.05)


async def _db_upgrade(config: Path, env: dict[str, str]) -> None:
    upgrade = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)),
        env={**os.environ, **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert await upgrade.wait() == 0


@dataclass(frozen=True)
class _Deployment:
    """One server's configuration, database and data directory, served once per life
    (:meth:`life`) on the same port: killed in one, recovered in the next."""

    config: Path
    env: dict[str, str]
    port: int

    @contextlib.asynccontextmanager
    async def life(self) -> AsyncIterator[tuple[subprocess.Popen[bytes], httpx.AsyncClient]]:
        """The server running, and a client with the key."""
        args = ("serve", "--config", str(self.config))
        with hermes_command(*args, port=self.port, env=self.env) as server:
            async with httpx.AsyncClient(
                verify=TLS_UNUSED,
                base_url=f"http://127.0.0.1:{self.port}",
                timeout=30,
                headers={"authorization": f"Bearer {KEY}"},
            ) as http:
                yield server, http


async def _deployment(
    simulator: SimulatorServer, database_url: str, directory: Path
) -> _Deployment:
    config = _config(directory, simulator)
    env = {"DATABASE_URL": database_url, "HERMES_DATA_DIR": str(directory / "data")}
    await _db_upgrade(config, env)
    return _Deployment(config, env, free_port())


def _kill(server: subprocess.Popen[bytes]) -> None:
    server.send_signal(signal.SIGKILL)
    server.wait(timeout=10)


async def test_a_run_killed_mid_tool_is_interrupted_and_its_transcript_closed(
    simulator: SimulatorServer, database_url: str, tmp_path: Path
) -> None:
    delegate = ToolCallSpec(name="delegate_task", arguments={"goal": "dig deeper"})
    simulator.state.script(
        MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(tool_calls=[delegate])),
                # The sub-agent's call hangs: the server is killed while the tool runs.
                Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60)),
                Step(reply=Reply(text="Back again.")),
            ]
        ),
    )
    deployment = await _deployment(simulator, database_url, tmp_path)
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "investigate"}],
    }
    async with (
        deployment.life() as (server, http),
        http.stream(
            "POST", "/v1/chat/completions", json=body, headers={"x-hermes-session-id": "dig"}
        ) as stream,
    ):
        run_id = stream.headers["x-hermes-run-id"]
        await _wait_for_upstream_calls(simulator, 2)
        _kill(server)

    async with deployment.life() as (_, http):
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        assert (run["status"], run["exit_reason"]) == ("interrupted", "interrupted")
        store = await Store.open(database_url, migrate=False)
        try:
            (session,) = await store.sessions.tips("alice", "dig")
            saved = [m.message for m in await store.sessions.messages(session.id)]
        finally:
            await store.close()
        assert [m["role"] for m in saved] == ["user", "assistant", "tool"]
        assert saved[1]["tool_calls"][0]["function"]["name"] == "delegate_task"
        assert saved[2]["tool_call_id"] == saved[1]["tool_calls"][0]["id"]
        assert saved[2]["content"] == INTERRUPTED_RESULT
        # The conversation's lock died with the run: the next turn goes through.
        again = await http.post(
            "/v1/chat/completions",
            json={**body, "stream": False},
            headers={"x-hermes-session-id": "dig"},
        )
        assert again.status_code == 200, again.text
        assert again.json()["choices"][0]["message"]["content"] == "Back again."


async def test_a_background_response_killed_mid_run_is_failed_after_the_restart(
    simulator: SimulatorServer, database_url: str, tmp_path: Path
) -> None:
    simulator.state.script(
        MODEL,
        Scenario(steps=[Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60))]),
    )
    deployment = await _deployment(simulator, database_url, tmp_path)
    body = {"model": "hermes-agent", "input": "take your time", "background": True}
    async with deployment.life() as (server, http):
        started = (await http.post("/v1/responses", json=body)).json()
        assert started["status"] == "queued"
        await _wait_for_upstream_calls(simulator, 1)
        _kill(server)
    async with deployment.life() as (_, http):
        after = (await http.get(f"/v1/responses/{started['id']}")).json()
    assert after["status"] == "failed"
    assert "restarted" in after["error"]["message"]


async def test_a_background_response_queued_behind_a_busy_conversation_is_failed_after_a_kill(
    simulator: SimulatorServer, database_url: str, tmp_path: Path
) -> None:
    simulator.state.script(
        MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60)),
                Step(reply=Reply(text="Back again.")),
            ]
        ),
    )
    deployment = await _deployment(simulator, database_url, tmp_path)
    async with deployment.life() as (server, http):
        conversation = (await http.post("/v1/conversations", json={})).json()["id"]
        body = {"model": "hermes-agent", "conversation": conversation, "background": True}
        ahead = await http.post("/v1/responses", json={**body, "input": "take your time"})
        assert ahead.status_code == 200, ahead.text
        await _wait_for_upstream_calls(simulator, 1)
        queued = (await http.post("/v1/responses", json={**body, "input": "then me"})).json()
        assert queued["status"] == "queued"
        _kill(server)
    async with deployment.life() as (_, http):
        after = (await http.get(f"/v1/responses/{queued['id']}")).json()
        again = await http.post(
            "/v1/responses",
            json={"model": "hermes-agent", "conversation": conversation, "input": "again"},
        )
    # Not left queued for ever: its run was on record before its create answered.
    assert after["status"] == "failed"
    assert "restarted" in after["error"]["message"]
    assert again.status_code == 200, again.text
    assert again.json()["output"][-1]["content"][0]["text"] == "Back again."


# A previous_response_id chain whose last response the kill cut off: continued once the
# server is back, the model sees every earlier turn (as after a response that failed any
# other way).


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
    deployment = await _deployment(simulator, database_url, tmp_path)
    async with deployment.life() as (server, http):
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
        await _wait_for_upstream_calls(simulator, 2)
        _kill(server)
    async with deployment.life() as (_, http):
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
