"""A replica frozen past its lease has its runs taken over by another: when it wakes it stops
them, and nothing it writes for them lands over the takeover (the database row is the fence)."""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store
from server.simulator import Reply, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.served import until
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    LEASE_SECONDS,
    Deployment,
    Key,
    Replica,
    deployed,
    deployment,
    first_text,
    key,
    slow_answer,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def test_a_frozen_replica_that_wakes_stops_its_taken_over_run_and_writes_nothing_over_it(
    deployed: dict[str, Replica],  # noqa: F811 (the fixture)
    key: Key,  # noqa: F811 (the fixture)
    simulator: SimulatorServer,
    deployment: Deployment,  # noqa: F811 (the fixture)
) -> None:
    slow_answer(simulator, Step(reply=Reply(text="Second turn.")))
    a, b = deployed["A"], deployed["B"]
    session = {"x-hermes-session-id": "frozen-talk"}
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=60) as http:

        async def status(run_id: str) -> str | None:
            run: dict[str, Any] = (await http.get(f"{b.base_url}/v1/runs/{run_id}")).json()
            return run.get("status")

        async with http.stream(
            "POST", f"{a.base_url}/v1/chat/completions", json=body, headers=session
        ) as stream:
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()
            await first_text(lines)
            a.process.send_signal(signal.SIGSTOP)
            try:

                async def interrupted() -> bool:
                    return await status(run_id) == "interrupted"

                assert await until(interrupted, server=b, seconds=30)
                # The session was let go: its next turn runs on B while A is still frozen.
                second = await http.post(
                    f"{b.base_url}/v1/chat/completions",
                    json={**body, "stream": False},
                    headers=session,
                )
                assert second.status_code == 200, second.text
                assert second.json()["choices"][0]["message"]["content"] == "Second turn."
            finally:
                a.process.send_signal(signal.SIGCONT)
            # A wakes, finds its lease was lost, and stops its run: the stream ends soon, not
            # after the minute the answer would have taken.
            woke_at = time.monotonic()
            async for _ in lines:
                assert time.monotonic() - woke_at < 4 * LEASE_SECONDS
        assert time.monotonic() - woke_at < 4 * LEASE_SECONDS

        # The takeover stands: for a while after A woke, the run stays interrupted.
        async def overwritten() -> bool:
            return await status(run_id) != "interrupted"

        assert not await until(overwritten, server=b, seconds=3 * LEASE_SECONDS)
    assert a.alive()
    # The second turn is the session's last word: nothing of A's run was written after it.
    store = await Store.open(deployment.postgres, migrate=False)
    try:
        [tip] = await store.sessions.tips(key.owner, "frozen-talk")
        saved = [m.message for m in await store.sessions.messages(tip.id)]
    finally:
        await store.close()
    assert saved[-1]["role"] == "assistant"
    assert saved[-1]["content"] == "Second turn."
    assert not any("word" in str(m.get("content")) for m in saved)
