"""A message with a file, sent while its session's turn runs under ``steer``: steering gives
the running turn a message's text alone, so such a message runs after that turn instead (as
``enqueue`` does), with its file placed in the workspace like any turn's, rather than losing
the file without a word."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.server.tools.conftest import (
    MODEL,
    UPSTREAM,
    ToolServer,
    answer,
    script,
    until,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

SLOW = Step(reply=Reply(text="word " * 30, chunk_count=30), fault=Fault(chunk_delay=2 / 30))
"""An answer streamed over about two seconds: the first turn is still running meanwhile."""


async def test_a_file_sent_to_steer_a_running_turn_reaches_the_agent_in_a_turn_of_its_own(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    uploaded = await openai.files.create(file=("late.csv", b"a,b\n1,2\n"), purpose="user_data")
    script(simulator, SLOW, answer("Read late.csv."))
    session = {"x-hermes-session-id": "steer-a-file"}
    first: list[Any] = [{"role": "user", "content": "first"}]
    running = asyncio.create_task(
        http.post("/v1/chat/completions", json={"model": MODEL, "messages": first}, headers=session)
    )
    assert await until(
        lambda: len(simulator.state.requests(scenario=UPSTREAM)) >= 1, server=tool_server
    )
    with_file = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Use this too."},
            {"type": "file", "file": {"file_id": uploaded.id}},
        ],
    }

    second = await http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [*first, with_file]},
        headers={**session, "x-hermes-session-busy": "steer"},
    )
    done = await running

    assert done.status_code == second.status_code == 200, second.text
    assert "x-hermes-steered-into" not in second.headers
    assert second.json()["choices"][0]["message"]["content"] == "Read late.csv."
    seen = simulator.state.requests(scenario=UPSTREAM)[-1].body["messages"][-1]["content"]
    text = seen if isinstance(seen, str) else "".join(p.get("text", "") for p in seen)
    assert "late.csv (8 bytes): it is in your workspace at late.csv" in text
    assert (tool_server.workspace("steer-a-file") / "late.csv").read_bytes() == b"a,b\n1,2\n"
