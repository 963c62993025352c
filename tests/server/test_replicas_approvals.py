"""A run waiting in place for an approval (``X-Hermes-Approval-Wait``) hears an answer posted
to any replica, not only to its own: it goes on at once and acts on that answer, approve or
deny, on three real replicas on one PostgreSQL and one Redis."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.served import sse_data, tool_results_of
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    UPSTREAM,
    Key,
    Replica,
    deployed,
    deployment,
    key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

WAIT_SECONDS = 60
"""What the run may wait: an answer that does not reach it shows as a run still paused long
after the answer, far inside this."""
HEARD_WITHIN = 15.0


def _asks_to_write(simulator: SimulatorServer, then: str) -> None:
    write = ToolCallSpec(name="write_file", arguments={"path": "notes.txt", "content": "hello"})
    simulator.state.script(
        UPSTREAM,
        Scenario(steps=[Step(reply=Reply(tool_calls=[write])), Step(reply=Reply(text=then))]),
    )


async def _asked(lines: AsyncIterator[str]) -> dict[str, Any]:
    """Read a chat stream up to the approval request it shows; the request's fields."""
    async for line in lines:
        for frame in sse_data(line):
            hermes = frame["choices"][0]["delta"].get("hermes") if frame["choices"] else None
            if hermes and hermes["type"] == "approval" and hermes["phase"] == "requested":
                return dict(hermes)
    raise AssertionError("the stream ended without asking")


async def _answered_elsewhere(
    runner: Replica, answerer: Replica, auth: dict[str, str], *, approve: bool, conversation: str
) -> tuple[list[dict[str, Any]], float, dict[str, Any]]:
    """A run on ``runner`` asks; ``answerer`` answers. The rest of the stream, the seconds
    from the answer to the stream's end, and the answer's body."""
    body = {
        "model": "hermes-asks",
        "stream": True,
        "messages": [{"role": "user", "content": "save a note"}],
    }
    headers = {"x-hermes-approval-wait": str(WAIT_SECONDS), "x-hermes-session-id": conversation}
    url = f"{runner.base_url}/v1/chat/completions"
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=auth, timeout=120) as http:
        async with http.stream("POST", url, json=body, headers=headers) as stream:
            assert stream.status_code == 200
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()
            asked = await _asked(lines)
            answer_url = f"{answerer.base_url}/v1/runs/{run_id}/approvals/{asked['approval_id']}"
            answered = await http.post(answer_url, json={"approve": approve})
            assert answered.status_code == 200, answered.text
            at = time.monotonic()
            rest = sse_data("\n".join([line async for line in lines]))
            took = time.monotonic() - at
        assert runner.alive()
        assert answerer.alive()
        return rest, took, answered.json()


async def test_an_approval_posted_to_another_replica_lets_the_waiting_run_go_on_at_once(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    _asks_to_write(simulator, "Saved.")

    rest, took, answer = await _answered_elsewhere(
        deployed["A"], deployed["B"], key.auth, approve=True, conversation="approve-on-b"
    )

    assert answer["status"] == "approved"
    assert took < HEARD_WITHIN, f"the run heard of B's approval only after {took:.1f} s"
    assert rest[-1]["hermes"]["exit_reason"] == "completed"
    assert "".join(f["choices"][0]["delta"].get("content") or "" for f in rest) == "Saved."
    assert tool_results_of(simulator, UPSTREAM)[-1] == "Created notes.txt (5 bytes)."


async def test_a_denial_posted_to_another_replica_keeps_the_call_from_running(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    _asks_to_write(simulator, "Left it.")

    rest, took, answer = await _answered_elsewhere(
        deployed["A"], deployed["C"], key.auth, approve=False, conversation="deny-on-c"
    )

    assert answer["status"] == "denied"
    assert took < HEARD_WITHIN, f"the run heard of C's denial only after {took:.1f} s"
    assert rest[-1]["hermes"]["exit_reason"] == "completed"
    assert tool_results_of(simulator, UPSTREAM)[-1].startswith("Denied by the user: write_file")
