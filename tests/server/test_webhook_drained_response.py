"""A background response its server stopped (a drain's end) is ``failed``, not
``cancelled``: no client asked (see ``ResponsesView._settle``); its webhook says the same
(``response.failed``), as a receiver that reads the response back finds it."""

from __future__ import annotations

import base64
import signal
from pathlib import Path

import pytest

from hermes_core.persistence import Store, sqlite_url
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import Served, http_client, until
from tests.server.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.slow

KEY = "sk-drained-response-0123456789"
UPSTREAM = "drained-response-upstream"
SECRET = "whsec_" + base64.b64encode(b"a shared secret, 32 bytes long!!").decode()


async def test_a_background_response_a_drain_stopped_is_announced_failed(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    reply = Reply(text="word " * 600, chunk_count=600)
    simulator.state.script(
        UPSTREAM, Scenario(steps=[Step(reply=reply, fault=Fault(chunk_delay=0.1))])
    )
    data = tmp_path / "data"
    config = tmp_path / "hermes.yaml"
    with WebhookReceiver() as receiver:
        config.write_text(
            f"server:\n  api_keys: [{{principal: alice, key: {KEY}}}]\n"
            f"  data_dir: {data}\n  drain_seconds: 1\n"
            'web:\n  allow: ["127.0.0.1"]\n'
            f"providers:\n  - {{name: sim, model: {UPSTREAM}, "
            f'base_url: "{simulator.base_url}/v1", api_mode: chat_completions}}\n'
            "profiles:\n  - {id: hermes-agent, providers: [sim]}\n"
            f'webhooks:\n  - url: "{receiver.url("drained")}"\n    secret: "{SECRET}"\n'
        )
        port, log = free_port(), tmp_path / "serve.log"
        with hermes_command("serve", "--config", str(config), port=port, log=log) as server:
            served = Served(f"http://127.0.0.1:{port}", data, server.pid, log)
            base = f"http://127.0.0.1:{port}"
            async with http_client(base, KEY) as http:
                created = await http.post(
                    "/v1/responses",
                    json={"model": "hermes-agent", "input": "go", "background": True},
                )
                response_id = created.json()["id"]

                async def answering() -> bool:
                    found = (await http.get(f"/v1/responses/{response_id}")).json()
                    return any(item["type"] == "message" for item in found["output"])

                assert await until(answering, server=served)
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=30) in (0, -signal.SIGTERM)

    store = await Store.open(sqlite_url(data / "hermes.db"), migrate=False)
    try:
        stored = await store.responses.get("alice", response_id)
        run_id = created.headers["x-hermes-run-id"]
        deliveries = await store.webhooks.of_run("alice", run_id)
    finally:
        await store.close()
    assert stored is not None
    assert stored.body["status"] == "failed"
    assert [d.event_type for d in deliveries] == ["response.failed"]
