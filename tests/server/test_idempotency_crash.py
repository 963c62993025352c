"""``Idempotency-Key`` across a crash: a server process killed with SIGKILL after a keyed request
claimed its key but before the request started its run, then started again. The key must not
stay claimed for its 24 hours (every retry waiting, then told 409 to retry): the request did
nothing, so the retry does the work. On SQLite and on PostgreSQL.

The request is held before its run by what holds it in production: its session is busy with
another turn, whose model answer the upstream simulator delays.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from hermes_core.persistence import IdempotencyRecord, Store
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.server.test_crash_recovery import MODEL, _deployment, _kill

pytestmark = pytest.mark.slow  # starts server processes


async def _until(holds: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + 30
    while not await holds():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


async def test_a_key_whose_request_was_killed_before_its_run_is_taken_over_after_the_restart(
    simulator: SimulatorServer, database_url: str, tmp_path: Path
) -> None:
    simulator.state.script(
        MODEL,
        Scenario(
            steps=[
                # The turn holding the session: its answer never comes (the server is killed).
                Step(reply=Reply(text="never sent"), fault=Fault(first_byte_delay=60)),
                Step(reply=Reply(text="Summarised after the restart.")),
            ]
        ),
    )
    deployment = await _deployment(simulator, database_url, tmp_path)
    key = str(uuid.uuid4())
    run = {"model": "hermes-agent", "input": "Summarise the night's logs.", "session": "night"}
    store = await Store.open(database_url, migrate=False)
    try:

        async def claim() -> IdempotencyRecord | None:
            return await store.idempotency.get("alice", key)

        async with deployment.life() as (server, http):
            chatting = asyncio.create_task(
                http.post(
                    "/v1/chat/completions",
                    json={"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"x-hermes-session-id": "night"},
                )
            )

            async def upstream_called() -> bool:
                return len(simulator.state.requests(scenario=MODEL)) == 1

            await _until(upstream_called, "the chat turn holds the session")
            creating = asyncio.create_task(
                http.post("/v1/runs", json=run, headers={"idempotency-key": key})
            )

            async def claimed() -> bool:
                return await claim() is not None

            await _until(claimed, "the run's create claimed its key")
            held = await claim()
            assert held is not None
            assert (held.state, held.run_id) == ("running", None)  # waiting for the session
            _kill(server)
            for cut in (chatting, creating):
                with pytest.raises(httpx.TransportError):  # cut off
                    await cut

        async with deployment.life() as (_, http):
            retried = await http.post("/v1/runs", json=run, headers={"idempotency-key": key})
            assert retried.status_code == 202, retried.text
            assert "idempotent-replayed" not in retried.headers  # the retry did the work
            run_id = retried.json()["id"]

            async def ended() -> bool:
                found = (await http.get(f"/v1/runs/{run_id}")).json()
                return bool(found["status"] == "completed")

            await _until(ended, "the retried run completed")
            again = await http.post("/v1/runs", json=run, headers={"idempotency-key": key})
            assert again.headers.get("idempotent-replayed") == "true"
            assert again.json()["id"] == run_id  # the key is the retry's now
        assert len(simulator.state.requests(scenario=MODEL)) == 2  # the chat's, the retried run's
    finally:
        await store.close()
