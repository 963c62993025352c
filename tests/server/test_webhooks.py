"""Webhooks and ``POST /v1/runs`` against real ``serve`` processes: a run started without a
client that tells a webhook when it ends, a background response's ``response.completed``, both
verified by the official SDK's ``client.webhooks.unwrap``; retries under one ``webhook-id``;
delivery state; a pending delivery that outlives a restart; internal addresses refused; and
``GET /v1/runs`` filtered and paged. The webhook endpoint is a real HTTP receiver on loopback
(allowed by ``web.allow``)."""

from __future__ import annotations

import base64
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from server.config import ConfigError, load_config
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import ServedProcess, answer, call, http_client, sdk_client, until
from tests.server.webhook_receiver import Received, WebhookReceiver

pytestmark = pytest.mark.slow

KEY = "sk-webhooks-0123456789abcdef"
OTHER_KEY = "sk-webhooks-other-0123456789"
MODEL = "webhooks-upstream"
SECRET = "whsec_" + base64.b64encode(b"a shared secret, 32 bytes long!!").decode()
RUN_SECRET = "whsec_" + base64.b64encode(b"the run's own secret, 32 bytes..").decode()
VERIFIER = OpenAI(api_key="unused")


def _unwrapped(hit: Received, secret: str) -> tuple[str, str]:
    """The event's type and ``data.id`` as the official SDK reads them, once it verified the
    signature (``InvalidWebhookSignatureError`` otherwise)."""
    event = VERIFIER.webhooks.unwrap(hit.body, hit.headers, secret=secret)
    return str(event.type), str(getattr(event.data, "id", ""))


def _config(directory: Path, simulator: SimulatorServer, receiver: WebhookReceiver) -> Path:
    config = directory / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}, {{principal: bob, key: {OTHER_KEY}}}]
web:
  allow: ["127.0.0.1"]
providers:
  - {{name: sim, model: {MODEL}, base_url: "{simulator.base_url}/v1", api_mode: chat_completions}}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
  - {{id: hermes-asks, providers: [sim], tools: [files], approvals: {{files: always}}}}
webhooks:
  - url: "{receiver.url("configured")}"
    secret: "{SECRET}"
    events: [response.completed, response.failed]
"""
    )
    return config


class Served:
    def __init__(self, process: Any, base: str, log: Path) -> None:
        self.process, self.base, self.log = process, base, log

    def alive(self) -> bool:
        return bool(self.process.poll() is None)


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer,
    receiver: WebhookReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("webhooks")
    config = _config(directory, _simulator_server, receiver)
    env = {"HERMES_DATA_DIR": str(directory / "data")}
    port = free_port()
    log = directory / "serve.log"
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as process:
        yield Served(process, f"http://127.0.0.1:{port}", log)


async def _start_run(base: str, key: str = KEY, **body: Any) -> httpx.Response:
    async with http_client(base, key) as http:
        return await http.post("/v1/runs", json={"model": "hermes-agent", **body})


async def _run(base: str, run_id: str) -> dict[str, Any]:
    async with http_client(base, KEY) as http:
        answer = await http.get(f"/v1/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found


async def test_a_run_started_with_post_runs_completes_and_its_webhook_verifies(
    served: Served, receiver: WebhookReceiver
) -> None:
    started = await _start_run(
        served.base,
        input="Summarise the night's logs.",
        metadata={"job": "nightly"},
        webhook={"url": receiver.url("run-done"), "secret": RUN_SECRET},
    )
    assert started.status_code == 202, started.text
    run = started.json()
    assert (run["object"], run["endpoint"], run["model"]) == ("hermes.run", "runs", "hermes-agent")
    assert run["metadata"] == {"job": "nightly"}
    assert run["status"] in ("running", "completed")

    assert await until(lambda: bool(receiver.delivered("run-done")), server=served)
    (hit,) = receiver.received("run-done")
    assert _unwrapped(hit, RUN_SECRET) == ("run.completed", run["id"])
    assert hit.event["object"] == "event"
    assert hit.event["data"]["status"] == "completed"

    async def shown_delivered() -> bool:
        found = await _run(served.base, run["id"])
        return bool(found["webhooks"]) and found["webhooks"][0]["status"] == "delivered"

    assert await until(shown_delivered, server=served)
    found = await _run(served.base, run["id"])
    assert found["status"] == "completed"
    assert found["metadata"] == {"job": "nightly"}
    (delivery,) = found["webhooks"]
    assert delivery["id"] == hit.headers["webhook-id"]
    assert (delivery["type"], delivery["attempts"], delivery["source"]) == (
        "run.completed",
        1,
        "request",
    )


async def test_a_background_responses_completed_webhook_verifies(
    served: Served, receiver: WebhookReceiver
) -> None:
    async with sdk_client(served.base, KEY) as client:
        response = await client.responses.create(
            model="hermes-agent", input="Take your time.", background=True
        )
    assert response.status == "queued"

    def announced() -> list[Any]:
        return [r for r in receiver.delivered("configured") if r.event["data"]["id"] == response.id]

    assert await until(lambda: bool(announced()), server=served)
    (hit,) = announced()
    assert _unwrapped(hit, SECRET) == ("response.completed", response.id)


async def test_a_response_the_client_waited_for_is_not_announced(
    served: Served, receiver: WebhookReceiver
) -> None:
    async with sdk_client(served.base, KEY) as client:
        waited = await client.responses.create(model="hermes-agent", input="Quick one.")
        background = await client.responses.create(
            model="hermes-agent", input="Later.", background=True
        )

    def ids() -> set[str]:
        return {r.event["data"]["id"] for r in receiver.received("configured")}

    assert await until(lambda: background.id in ids(), server=served)
    assert waited.id not in ids()


async def test_a_receiver_that_fails_twice_gets_the_event_once_more_with_the_same_id(
    served: Served, receiver: WebhookReceiver
) -> None:
    receiver.fail("flaky", 500, 503)
    started = await _start_run(
        served.base,
        input="Go.",
        webhook={"url": receiver.url("flaky"), "secret": RUN_SECRET},
    )
    assert started.status_code == 202, started.text
    assert await until(lambda: bool(receiver.delivered("flaky")), server=served, seconds=60)
    hits = receiver.received("flaky")
    assert [hit.answered for hit in hits] == [500, 503, 200]
    assert len({hit.headers["webhook-id"] for hit in hits}) == 1
    assert len({hit.event["id"] for hit in hits}) == 1
    assert _unwrapped(hits[-1], RUN_SECRET) == ("run.completed", started.json()["id"])

    # The receiver has its 200 a moment before the server records the delivery as done.
    deliveries: list[dict[str, Any]] = []

    async def recorded() -> bool:
        async with http_client(served.base, KEY) as http:
            page = await http.get(
                "/v1/webhooks/deliveries", params={"run_id": started.json()["id"]}
            )
        deliveries[:] = page.json()["data"]
        return len(deliveries) == 1 and deliveries[0]["status"] != "pending"

    assert await until(recorded, server=served, seconds=30), deliveries
    (delivery,) = deliveries
    assert delivery["status"] == "delivered"
    assert delivery["attempts"] == 3
    assert delivery["last_status_code"] == 200


async def test_deliveries_are_the_keys_own(served: Served, receiver: WebhookReceiver) -> None:
    started = await _start_run(
        served.base, input="Mine.", webhook={"url": receiver.url("alices"), "secret": RUN_SECRET}
    )
    assert await until(lambda: bool(receiver.delivered("alices")), server=served)
    run_id = started.json()["id"]
    async with http_client(served.base, OTHER_KEY) as http:
        others = (await http.get("/v1/webhooks/deliveries")).json()["data"]
        assert all(d["run_id"] != run_id for d in others)
        assert (await http.get(f"/v1/runs/{run_id}")).status_code == 404
    async with http_client(served.base, KEY) as http:
        mine = (await http.get("/v1/webhooks/deliveries")).json()["data"]
    assert any(d["run_id"] == run_id for d in mine)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.7/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::ffff:192.168.1.1]/hook",
        "http://127.0.0.2/hook",
    ],
)
async def test_an_internal_webhook_url_is_refused(served: Served, url: str) -> None:
    answer = await _start_run(served.base, input="x", webhook={"url": url, "secret": RUN_SECRET})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "webhook.url"


async def test_a_webhook_without_a_secret_is_refused(served: Served) -> None:
    answer = await _start_run(served.base, input="x", webhook={"url": "http://127.0.0.1:9/hook"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "webhook.secret"


def test_an_internal_webhook_url_in_the_configuration_is_refused(
    tmp_path: Path, simulator: SimulatorServer, receiver: WebhookReceiver
) -> None:
    config = _config(tmp_path, simulator, receiver)
    config.write_text(config.read_text().replace(receiver.base_url, "http://10.1.2.3:8080"))
    with pytest.raises(ConfigError, match="webhooks"):
        load_config(config, {})


async def test_get_runs_filters_and_pages(served: Served) -> None:
    since = int(time.time())
    ids = []
    for session in ("ledger", "ledger", "other"):
        started = await _start_run(served.base, input="Count.", session=session)
        assert started.status_code == 202, started.text
        ids.append(started.json()["id"])

    async def listed(**params: Any) -> dict[str, Any]:
        async with http_client(served.base, KEY) as http:
            answer = await http.get("/v1/runs", params=params)
            assert answer.status_code == 200, answer.text
            found: dict[str, Any] = answer.json()
            return found

    async def all_completed() -> bool:
        found = await listed(since=since, status="completed")
        return {run["id"] for run in found["data"]} >= set(ids)

    assert await until(all_completed, server=served)
    ledger = await listed(session="ledger", since=since)
    assert [run["id"] for run in ledger["data"]] == [ids[1], ids[0]]  # newest first
    first = await listed(session="ledger", since=since, limit=1)
    assert ([r["id"] for r in first["data"]], first["has_more"]) == ([ids[1]], True)
    second = await listed(session="ledger", since=since, limit=1, after=first["last_id"])
    assert ([r["id"] for r in second["data"]], second["has_more"]) == ([ids[0]], False)
    assert (await listed(status="failed", since=since))["data"] == []
    async with http_client(served.base, OTHER_KEY) as http:
        theirs = (await http.get("/v1/runs", params={"since": since})).json()["data"]
    assert theirs == []


async def test_a_pending_delivery_is_delivered_after_a_restart(
    simulator: SimulatorServer, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    receiver.fail("outage", *[503] * 50)
    config = _config(tmp_path, simulator, receiver)
    env = {"HERMES_DATA_DIR": str(tmp_path / "data")}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as first:
        server: ServedProcess = Served(first, base, log)
        started = await _start_run(
            base, input="Go.", webhook={"url": receiver.url("outage"), "secret": RUN_SECRET}
        )
        assert started.status_code == 202, started.text
        assert await until(lambda: bool(receiver.received("outage")), server=server)
    tried = receiver.received("outage")
    receiver.fail("outage")  # the endpoint is back
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as again:
        server = Served(again, base, log)
        assert await until(lambda: bool(receiver.delivered("outage")), server=server, seconds=60)
    (hit,) = receiver.delivered("outage")
    assert hit.headers["webhook-id"] == tried[0].headers["webhook-id"]
    assert _unwrapped(hit, RUN_SECRET) == ("run.completed", started.json()["id"])


@pytest.mark.parametrize(
    "body",
    [
        {"model": "hermes-agent"},
        {"model": "hermes-agent", "input": "x", "session": "a", "conversation": "conv_1"},
        {"model": "hermes-agent", "input": "x", "metadata": {str(n): "v" for n in range(17)}},
        {"model": "hermes-agent", "input": "x", "webhook": {"url": 7}},
    ],
)
async def test_a_bad_run_body_is_a_400(served: Served, body: dict[str, Any]) -> None:
    async with http_client(served.base, KEY) as http:
        answer = await http.post("/v1/runs", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "invalid_request_error"


async def test_a_run_asking_for_approval_sends_approval_requested_then_its_ending(
    served: Served, receiver: WebhookReceiver, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        MODEL,
        Scenario(steps=[call("write_file", path="notes.txt", content="hi"), answer("Written.")]),
    )
    started = await _start_run(
        served.base,
        key=KEY,
        model="hermes-asks",
        input="Write a note.",
        webhook={"url": receiver.url("asks"), "secret": RUN_SECRET},
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["id"]
    assert await until(lambda: len(receiver.delivered("asks")) == 2, server=served)
    events = [_unwrapped(hit, RUN_SECRET) for hit in receiver.delivered("asks")]
    found = await _run(served.base, run_id)
    (approval,) = found["approvals"]
    assert sorted(events) == sorted(
        [("approval.requested", approval["id"]), ("run.completed", run_id)]
    )
    (asked,) = [h.event for h in receiver.delivered("asks") if h.event["type"].startswith("appr")]
    assert asked["data"]["run_id"] == run_id
    assert found["status"] == "awaiting_approval"


async def test_a_reload_replaces_the_configured_webhooks_and_refuses_an_internal_one(
    simulator: SimulatorServer, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    config = _config(tmp_path, simulator, receiver)
    env = {"HERMES_DATA_DIR": str(tmp_path / "data")}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as process:
        server = Served(process, base, log)
        config.write_text(config.read_text().replace('/hooks/configured"', '/hooks/reloaded"'))
        process.send_signal(signal.SIGHUP)
        assert await until(lambda: "live (was" in log.read_text(), server=server)
        async with sdk_client(base, KEY) as client:
            response = await client.responses.create(
                model="hermes-agent", input="After the reload.", background=True
            )
        assert await until(lambda: bool(receiver.delivered("reloaded")), server=server)
        (hit,) = receiver.delivered("reloaded")
        assert _unwrapped(hit, SECRET) == ("response.completed", response.id)

        config.write_text(config.read_text().replace(receiver.base_url, "http://10.9.8.7"))
        process.send_signal(signal.SIGHUP)
        assert await until(lambda: "config reload refused" in log.read_text(), server=server)
        assert "webhooks[0].url" in log.read_text()


async def test_a_run_whose_server_died_is_told_failed_once_recovery_closes_it(
    simulator: SimulatorServer, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    hang = Step(reply=Reply(text="too late"), fault=Fault(first_byte_delay=120))
    simulator.state.script(MODEL, Scenario(steps=[hang]))
    config = _config(tmp_path, simulator, receiver)
    env = {"HERMES_DATA_DIR": str(tmp_path / "data")}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as first:
        server: ServedProcess = Served(first, base, log)
        started = await _start_run(
            base, input="Go.", webhook={"url": receiver.url("crash"), "secret": RUN_SECRET}
        )
        assert started.status_code == 202, started.text
        assert await until(lambda: bool(simulator.state.requests(scenario=MODEL)), server=server)
        first.send_signal(signal.SIGKILL)  # mid-run: no ending, no webhook from it
        first.wait(timeout=30)
    assert receiver.received("crash") == []
    with hermes_command("serve", "--config", str(config), port=port, env=env, log=log) as again:
        server = Served(again, base, log)
        assert await until(lambda: bool(receiver.delivered("crash")), server=server, seconds=60)
    (hit,) = receiver.delivered("crash")
    assert _unwrapped(hit, RUN_SECRET) == ("run.failed", started.json()["id"])
    assert json.loads(hit.body)["data"]["status"] == "interrupted"
