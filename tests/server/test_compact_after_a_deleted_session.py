"""``/v1/responses/compact`` with a ``previous_response_id`` whose session was deleted
(``DELETE /v1/sessions/{name}``) is a 400 ``previous_response_not_found``, as continuing that
response is: compacting only the new input would hand back a compaction that silently lost the
whole conversation."""

from __future__ import annotations

import httpx

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


async def test_compacting_after_a_response_whose_session_was_deleted_is_a_400(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Noted."))]))
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=auth, timeout=30
    ) as http:
        made = await http.post(
            "/v1/responses", json={"model": "hermes-agent", "input": "remember 42"}
        )
        assert made.status_code == 200, made.text
        deleted = await http.delete(f"/v1/sessions/{made.headers['x-hermes-session-id']}")
        assert deleted.status_code == 200, deleted.text
        body = {"model": "hermes-agent", "input": "and?", "previous_response_id": made.json()["id"]}
        continued = await http.post("/v1/responses", json=body)
        assert continued.status_code == 400, continued.text
        assert continued.json()["error"]["code"] == "previous_response_not_found"
        compacted = await http.post("/v1/responses/compact", json=body)
        assert compacted.status_code == 400, compacted.text
        assert compacted.json()["error"]["code"] == "previous_response_not_found"


async def test_an_end_user_compacts_after_their_own_response(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Noted, Ann."))]))
    headers = {"authorization": f"Bearer {KEY_ALICE}", "x-hermes-memory-scope": "ann"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=headers, timeout=30
    ) as http:
        made = await http.post(
            "/v1/responses", json={"model": "hermes-agent", "input": "remember 42"}
        )
        assert made.status_code == 200, made.text
        body = {"model": "hermes-agent", "input": "and?", "previous_response_id": made.json()["id"]}
        compacted = await http.post("/v1/responses/compact", json=body)
        assert compacted.status_code == 200, compacted.text
