"""The usage ledger gains each model call as the run counts it (docs/usage.md), against a real
``serve`` process: while a run waits on a slow tool, ``GET /v1/usage`` already holds its first
model call; once it ends, its two calls, each once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_core.tools.toolsets import sandbox_missing
from server.files.workspaces import conversation_workspace
from server.simulator import SimulatorServer
from tests.server.served import (
    Served,
    answer,
    call,
    http_client,
    script,
    sdk_client,
    serving,
    simulated_provider,
    until,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = f"usage-per-call-{uuid.uuid4().hex[:8]}"
KEY = f"sk-usage-per-call-{uuid.uuid4().hex}"
CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
providers:
{provider}profiles:
  - id: agent
    providers: [sim]
    tools: [shell]
    approvals: {{shell: never}}
    sandbox: {{timeout_seconds: 60}}
"""


@pytest.fixture
def served(simulator: SimulatorServer, tmp_path: Path) -> Iterator[Served]:
    reason = sandbox_missing()
    if reason is not None:
        pytest.skip(f"no sandbox here: {reason}")
    data = tmp_path / "data"
    data.mkdir()
    provider = simulated_provider(simulator, UPSTREAM)
    with serving(data, CONFIG.format(data=data, key=KEY, provider=provider)) as server:
        yield server


async def test_a_runs_first_calls_are_in_the_usage_while_it_still_runs(
    served: Served, simulator: SimulatorServer
) -> None:
    conversation = f"conv-{uuid.uuid4().hex[:10]}"
    # The tool waits until the test creates ``go`` in the conversation's workspace.
    slow = "touch started; while [ ! -e go ]; do sleep 0.05; done; echo finished"
    script(simulator, UPSTREAM, call("shell", command=slow), answer("Done."))
    workspace = conversation_workspace(served.data_dir / "workspaces", "alice", conversation)

    async with (
        sdk_client(served.base_url, KEY) as client,
        http_client(served.base_url, KEY) as http,
    ):
        running = asyncio.create_task(
            client.chat.completions.create(
                model="agent",
                messages=[{"role": "user", "content": "go"}],
                extra_headers={"x-hermes-session-id": conversation},
            )
        )

        async def calls_so_far() -> int:
            usage = await http.get("/v1/usage", params={"group_by": ""})
            assert usage.status_code == 200, usage.text
            return int(usage.json()["totals"]["calls"])

        async def tool_started() -> bool:
            return await asyncio.to_thread((workspace / "started").exists)

        assert await until(tool_started, server=served, seconds=60)
        assert await calls_so_far() == 1  # the call that asked for the tool
        runs = (await http.get("/v1/runs")).json()["data"]
        assert [run["status"] for run in runs] == ["running"]

        await asyncio.to_thread((workspace / "go").touch)
        completion = await running
        assert completion.choices[0].message.content == "Done."
        assert await calls_so_far() == 2  # each call once: the ending added nothing again
