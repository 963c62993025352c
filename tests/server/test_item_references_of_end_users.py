"""An ``item_reference`` names an item of one of the caller's stored responses: one of another
end user's responses behind the same key is as unknown to it as to ``previous_response_id``
(docs/end-users.md), so its text never reaches the caller's model."""

from __future__ import annotations

import httpx

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL

ANN = {"x-hermes-memory-scope": "ann"}
BEN = {"x-hermes-memory-scope": "ben"}


async def test_an_item_of_another_end_users_response_is_not_found(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(steps=[Step(reply=Reply(text=t)) for t in ("Ann's secret plan.", "ok")]),
    )
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=auth, timeout=30
    ) as http:
        made = await http.post(
            "/v1/responses", json={"model": "hermes-agent", "input": "plan"}, headers=ANN
        )
        assert made.status_code == 200, made.text
        item_id = made.json()["output"][-1]["id"]
        reference = {"type": "item_reference", "id": item_id}
        body = {"model": "hermes-agent", "input": [reference, {"role": "user", "content": "go"}]}
        refused = await http.post("/v1/responses", json=body, headers=BEN)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "input"
        compacted = await http.post("/v1/responses/compact", json=body, headers=BEN)
        assert compacted.status_code == 400, compacted.text
        own = await http.post("/v1/responses", json=body, headers=ANN)
        assert own.status_code == 200, own.text
    sent = [r.body["messages"] for r in simulator.state.requests(scenario=UPSTREAM_MODEL)]
    assert len(sent) == 2
    assert "Ann's secret plan." in str(sent[-1])
