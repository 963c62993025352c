"""A run's life seen from outside: resuming its event stream by ``Last-Event-ID``, and a server
shutdown that ends live runs honestly and records them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from hermes_core.persistence import Store, sqlite_url
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

AUTH = {"authorization": f"Bearer {KEY_ALICE}"}
HELLO = [{"role": "user", "content": "hello"}]


def _ids(text: str) -> list[int]:
    return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]


async def test_last_event_id_resumes_after_the_event_a_client_saw(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    lookup = ToolCallSpec(name="lookup", arguments={"word": "okapi"})
    steps = [Step(reply=Reply(tool_calls=[lookup])), Step(reply=Reply(text="An okapi."))]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        done = await http.post(
            "/v1/chat/completions", headers=AUTH, json={"model": "hermes-agent", "messages": HELLO}
        )
        events = f"/v1/runs/{done.headers['x-hermes-run-id']}/events"
        everything = _ids((await http.get(events, headers=AUTH)).text)
        resumed = await http.get(events, headers={**AUTH, "last-event-id": "4"})
        # The later of ``after`` and Last-Event-ID wins: neither replays what the other skipped.
        both = await http.get(events + "?after=6", headers={**AUTH, "last-event-id": "4"})
    assert everything == list(range(len(everything)))
    assert _ids(resumed.text) == everything[5:]
    assert _ids(both.text) == everything[7:]


@pytest.mark.parametrize("value", ["²³", "1" * 5000, "four", "1.5", ""], ids=repr)
async def test_a_last_event_id_that_is_no_event_id_is_a_400(
    simulator: SimulatorServer, hermes: ThreadedServer, value: str
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="ok"))]))
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        done = await http.post(
            "/v1/chat/completions", headers=AUTH, json={"model": "hermes-agent", "messages": HELLO}
        )
        events = f"/v1/runs/{done.headers['x-hermes-run-id']}/events"
        # As bytes: a header may hold any of them (HTTP leaves their meaning to the server).
        headers = [(b"authorization", AUTH["authorization"].encode())]
        answer = await http.get(events, headers=[*headers, (b"last-event-id", value.encode())])
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "last-event-id"


async def test_a_shutdown_interrupts_live_runs_and_records_them_as_interrupted(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    slow = Step(reply=Reply(text="word " * 40, chunk_count=40), fault=Fault(chunk_delay=0.25))
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[slow]))
    database = sqlite_url(tmp_path / "hermes.db")
    services = make_services(simulator, database_url=database)
    server = ThreadedServer(create_app(services), on_exit=services.runs.begin_exit).start()
    body = {"model": "hermes-agent", "messages": HELLO, "stream": True}
    try:
        async with (
            httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http,
            http.stream("POST", "/v1/chat/completions", headers=AUTH, json=body) as response,
        ):
            run_id = response.headers["x-hermes-run-id"]
            async for line in response.aiter_lines():
                if '"content":"word' in line:
                    break  # the run is live and streaming: now the server goes down
            await asyncio.to_thread(server.stop)
    finally:
        server.stop()
    store = await Store.open(database, migrate=False)
    try:
        record = await store.runs.get("alice", run_id)
    finally:
        await store.close()
    assert record is not None
    assert (record.status, record.exit_reason) == ("interrupted", "interrupted")
    assert record.error == "Interrupted: server shutting down"


async def _interrupts(http: httpx.AsyncClient, endpoint: str) -> float:
    text = (await http.get("/metrics")).text
    prefix = f'hermes_interrupts_total{{endpoint="{endpoint}",source="client_disconnect"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


async def _until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    ("path", "body", "endpoint"),
    [
        ("/v1/chat/completions", {"model": "hermes-agent", "messages": HELLO}, "chat_completions"),
        ("/v1/responses", {"model": "hermes-agent", "input": "hello"}, "responses"),
    ],
    ids=["chat", "responses"],
)
async def test_a_waiting_client_that_leaves_stops_its_run(
    simulator: SimulatorServer,
    hermes: ThreadedServer,
    path: str,
    body: dict[str, object],
    endpoint: str,
) -> None:
    slow = Step(reply=Reply(text="word " * 40, chunk_count=40), fault=Fault(chunk_delay=0.25))
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[slow]))
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        before = await _interrupts(http, endpoint)
        async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                await impatient.post(path, headers=AUTH, json=body, timeout=0.5)

        async def stopped() -> bool:
            return await _interrupts(http, endpoint) == before + 1

        await _until(stopped, "the run was stopped")
    (call,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert call.outcome == "disconnected"  # the upstream call was abandoned too


async def test_a_client_may_ask_its_run_to_go_on_without_it(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    slow = Step(reply=Reply(text="word " * 4, chunk_count=4), fault=Fault(chunk_delay=0.25))
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[slow]))
    body = {"model": "hermes-agent", "messages": HELLO}
    headers = {**AUTH, "x-hermes-keep-running": "true"}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            await impatient.post("/v1/chat/completions", headers=headers, json=body, timeout=0.3)

    async def answered() -> bool:
        calls = simulator.state.requests(scenario=UPSTREAM_MODEL)
        return bool(calls) and calls[0].outcome == "completed"

    await _until(answered, "the upstream call completed")
