"""A chat turn sent while another turn of its session runs (``session_busy`` ``wait``,
``enqueue``, or a ``steer`` that came too late) carries a history without that turn's answer:
its client had not seen it yet. Once the running turn ends, the queued one runs after it,
answer included, as docs/webhooks.md says, instead of forking the answer away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


def user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


async def _chat(
    http: httpx.AsyncClient, messages: list[dict[str, Any]], busy: str
) -> httpx.Response:
    return await http.post(
        "/v1/chat/completions",
        json={"model": "hermes-agent", "messages": messages},
        headers={"x-hermes-session-id": f"queued-{busy}", "x-hermes-session-busy": busy},
    )


@pytest.fixture
async def http(hermes: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        verify=TLS_UNUSED,
        base_url=hermes.base_url,
        headers={"authorization": f"Bearer {KEY_ALICE}"},
        timeout=30,
    ) as client:
        yield client


@pytest.mark.parametrize("busy", ["wait", "enqueue"])
async def test_a_turn_queued_behind_another_runs_after_its_answer(
    simulator: SimulatorServer, http: httpx.AsyncClient, busy: str
) -> None:
    wait = ToolCallSpec(name="wait", arguments={"seconds": 0.5})
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(tool_calls=[wait])),
                Step(reply=Reply(text="first done")),
                Step(reply=Reply(text="second done")),
            ]
        ),
    )
    first = asyncio.create_task(_chat(http, [user("first")], busy))
    deadline = asyncio.get_running_loop().time() + 10
    while not simulator.state.requests(scenario=UPSTREAM_MODEL):
        assert asyncio.get_running_loop().time() < deadline, "the first turn never began"
        await asyncio.sleep(0.02)
    second = await _chat(http, [user("first"), user("second")], busy)
    assert (await first).status_code == 200
    assert second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "second done"
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    said = [(m["role"], m.get("content")) for m in sent if m["role"] in ("user", "assistant")]
    assert said[-2:] == [("assistant", "first done"), ("user", "second")]
