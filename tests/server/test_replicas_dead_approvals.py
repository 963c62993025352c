"""A run that waited in place for an approval (``X-Hermes-Approval-Wait``) on a replica that
died: nobody acts on its question any more, so the conversation's next words are not taken for
its answer (a "sure" about something else must not run the dead run's tool call)."""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest

from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.served import tool_results_of, until
from tests.server.test_replicas import (  # noqa: F401  (fixtures)
    UPSTREAM,
    Key,
    Replica,
    deployed,
    deployment,
    key,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def test_a_question_of_a_run_whose_replica_died_is_not_answered_by_the_next_turn(
    deployed: dict[str, Replica],  # noqa: F811
    key: Key,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    write = ToolCallSpec(name="write_file", arguments={"path": "dead.txt", "content": "hello"})
    simulator.state.script(
        UPSTREAM,
        Scenario(steps=[Step(reply=Reply(tool_calls=[write])), Step(reply=Reply(text="Noted."))]),
    )
    a, b = deployed["A"], deployed["B"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, headers=key.auth, timeout=120) as http:
        conversation = (await http.post(f"{b.base_url}/v1/conversations", json={})).json()["id"]
        body: dict[str, Any] = {
            "model": "hermes-asks",
            "stream": True,
            "conversation": conversation,
            "input": "save a note",
        }
        waits = {"x-hermes-approval-wait": "60"}
        url = f"{a.base_url}/v1/responses"
        async with http.stream("POST", url, json=body, headers=waits) as stream:
            assert stream.status_code == 200
            run_id = stream.headers["x-hermes-run-id"]
            lines = stream.aiter_lines()  # held: let go, it would close the stream
            await anext(lines)

            async def asked() -> bool:
                run: dict[str, Any] = (await http.get(f"{b.base_url}/v1/runs/{run_id}")).json()
                return bool(run.get("approvals"))

            assert await until(asked, server=b)  # the question is in the database
            a.process.send_signal(signal.SIGKILL)
            a.process.wait(timeout=10)

        async def interrupted() -> bool:
            run: dict[str, Any] = (await http.get(f"{b.base_url}/v1/runs/{run_id}")).json()
            return bool(run.get("status") == "interrupted")

        assert await until(interrupted, server=b)
        # The conversation's next turn talks of something else; its first word is a yes.
        later = {**body, "stream": False, "input": "ok, thanks"}
        answer = await http.post(f"{b.base_url}/v1/responses", json=later)
        assert answer.status_code == 200, answer.text
        dead = (await http.get(f"{b.base_url}/v1/runs/{run_id}")).json()
    ran = [result for result in tool_results_of(simulator, UPSTREAM) if "dead.txt" in result]
    assert ran == [], ran
    assert [approval["status"] for approval in dead["approvals"]] == ["expired"]
