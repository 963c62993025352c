"""A turn that comes while its session runs another (``session_busy``), against a real
``serve`` process: each mode on chat and on Responses, per request (``X-Hermes-Session-Busy``)
and per profile, and ``POST /v1/runs/{id}/steer``. The first turn of each test is a slow
answer streamed by the upstream simulator; the second comes while it streams."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.server.served import (
    Served,
    answer,
    http_client,
    script,
    serving,
    simulated_provider,
    sse_data,
    until,
)

pytestmark = pytest.mark.slow

KEY = "sk-busy-0123456789abcdef"
OTHER_KEY = "sk-busy-other-0123456789"
MODEL = "busy-upstream"
STEER = "Also say the word pineapple."
ENDPOINTS = ("chat", "responses")


BUSY_SECONDS = 2.0
"""How long a first turn's answer streams when the test only needs it still running while
one more request comes: that request is one loopback round trip (milliseconds), so two
seconds leave a wide margin on a busy machine, and each such test waits for the answer."""
WAIT_SECONDS = 1
"""``server.session_wait_seconds``: how long a ``wait`` turn waits for the session."""


def slow(seconds: float = BUSY_SECONDS) -> Step:
    """An answer streamed over about ``seconds`` (30 chunks)."""
    return Step(
        reply=Reply(text="word " * 30, chunk_count=30), fault=Fault(chunk_delay=seconds / 30)
    )


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("busy")
    config = f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}, {{principal: bob, key: {OTHER_KEY}}}]
  session_wait_seconds: {WAIT_SECONDS}
providers:
{simulated_provider(_simulator_server, MODEL)}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
  - {{id: hermes-steers, providers: [sim], session_busy: steer}}
"""
    with serving(data, config) as server:
        yield server


async def started(simulator: SimulatorServer, served: Served, calls: int = 1) -> None:
    """Until the upstream has been called ``calls`` times (the first turn is streaming)."""
    assert await until(
        lambda: len(simulator.state.requests(scenario=MODEL)) >= calls, server=served
    )


async def turn(
    http: httpx.AsyncClient,
    endpoint: str,
    where: str,
    text: str,
    mode: str | None = None,
    model: str = "hermes-agent",
    before: tuple[str, ...] = (),
) -> httpx.Response:
    """One turn of the session (chat: named ``where``) or conversation (Responses: the
    ``conv_`` id ``where``), with ``mode`` as its busy policy. ``before``: the user messages
    a chat client's history holds before ``text`` (a Responses conversation holds them)."""
    headers = {"x-hermes-session-busy": mode} if mode else {}
    if endpoint == "chat":
        headers["x-hermes-session-id"] = where
        said = [{"role": "user", "content": each} for each in (*before, text)]
        body: dict[str, Any] = {"model": model, "messages": said}
        return await http.post("/v1/chat/completions", json=body, headers=headers)
    body = {"model": model, "input": text, "conversation": where}
    return await http.post("/v1/responses", json=body, headers=headers)


async def place(http: httpx.AsyncClient, endpoint: str) -> str:
    """A fresh session name (chat) or conversation (Responses)."""
    if endpoint == "chat":
        return f"busy-{uuid.uuid4().hex[:8]}"
    created = await http.post("/v1/conversations", json={})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def text_of(endpoint: str, response: httpx.Response) -> str:
    body = response.json()
    if endpoint == "chat":
        return str(body["choices"][0]["message"]["content"])
    return "".join(
        part["text"]
        for item in body["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def said(simulator: SimulatorServer, call: int) -> list[str]:
    """The user messages of the upstream's ``call``-th request (0-based)."""
    messages = simulator.state.requests(scenario=MODEL)[call].body["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "user"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_reject_answers_a_busy_sessions_second_turn_409(
    simulator: SimulatorServer, served: Served, endpoint: str
) -> None:
    script(simulator, MODEL, slow())
    async with http_client(served.base_url, KEY) as http:
        where = await place(http, endpoint)
        first = asyncio.create_task(turn(http, endpoint, where, "first"))
        await started(simulator, served)
        # ``refuse`` is another name of ``reject``: each is refused while the first turn runs.
        refused = [await turn(http, endpoint, where, mode, mode) for mode in ("reject", "refuse")]
        assert (await first).status_code == 200

    for each in refused:
        assert each.status_code == 409, each.text
        assert each.json()["error"]["code"] == "session_busy"


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_wait_gives_up_after_its_wait_but_enqueue_runs_after_the_turn(
    simulator: SimulatorServer, served: Served, endpoint: str
) -> None:
    # The first turn outlasts the wait by the usual margin: the wait must end in a 409.
    script(simulator, MODEL, slow(WAIT_SECONDS + BUSY_SECONDS), answer("Second."))
    async with http_client(served.base_url, KEY) as http:
        where = await place(http, endpoint)
        first = asyncio.create_task(turn(http, endpoint, where, "first"))
        await started(simulator, served)
        waited = await turn(http, endpoint, where, "waits", "wait")  # 1 s, then 409
        queued = await turn(http, endpoint, where, "second", "enqueue")
        done = await first

    assert waited.status_code == 409, waited.text
    assert done.status_code == 200
    assert text_of(endpoint, done).startswith("word")
    assert queued.status_code == 200, queued.text
    assert text_of(endpoint, queued) == "Second."
    assert said(simulator, 1)[-1] == "second"


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_interrupt_stops_the_running_turn_and_runs_the_new_message(
    simulator: SimulatorServer, served: Served, endpoint: str
) -> None:
    script(simulator, MODEL, slow(30), answer("Second."))
    async with http_client(served.base_url, KEY) as http:
        where = await place(http, endpoint)
        first = asyncio.create_task(turn(http, endpoint, where, "first"))
        await started(simulator, served)
        # Its history goes on from the running turn's (one that forked it would wait).
        second = await turn(http, endpoint, where, "second", "interrupt", before=("first",))
        stopped = await first

    assert second.status_code == 200, second.text
    assert text_of(endpoint, second) == "Second."
    if endpoint == "chat":
        assert stopped.json()["hermes"]["exit_reason"] == "interrupted"
    else:
        assert stopped.json()["status"] != "completed"
    # The stopped turn left no answer: its message and the new one reach the model together.
    assert said(simulator, 1)[-1].endswith("second")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
async def test_steer_puts_the_message_into_the_running_turns_next_model_call(
    simulator: SimulatorServer, served: Served, endpoint: str
) -> None:
    script(simulator, MODEL, slow(), answer("Words, and pineapple."))
    async with http_client(served.base_url, KEY) as http:
        where = await place(http, endpoint)
        first = asyncio.create_task(turn(http, endpoint, where, "first"))
        await started(simulator, served)
        steered = await turn(http, endpoint, where, STEER, "steer", before=("first",))
        done = await first

    assert steered.status_code == 200, steered.text
    assert steered.headers["x-hermes-steered-into"] == done.headers["x-hermes-run-id"]
    assert text_of(endpoint, done).endswith("Words, and pineapple.")
    assert text_of(endpoint, steered) == text_of(endpoint, done)  # one answer to both
    assert said(simulator, 1)[-1] == STEER
    assert len(simulator.state.requests(scenario=MODEL)) == 2  # no turn of its own


async def test_a_profiles_session_busy_is_its_turns_default(
    simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow(), answer("Words, and pineapple."))
    async with http_client(served.base_url, KEY) as http:
        first = asyncio.create_task(
            turn(http, "chat", "by-profile", "first", model="hermes-steers")
        )
        await started(simulator, served)
        steered = await turn(
            http, "chat", "by-profile", STEER, model="hermes-steers", before=("first",)
        )
        await first

    assert "x-hermes-steered-into" in steered.headers
    assert said(simulator, 1)[-1] == STEER


async def test_an_unknown_busy_mode_is_a_400(served: Served) -> None:
    async with http_client(served.base_url, KEY) as http:
        refused = await turn(http, "chat", "any", "hi", "shove")

    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "x-hermes-session-busy"


async def test_steering_a_run_changes_what_it_does_next(
    simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow(), answer("Words, and pineapple."))
    async with http_client(served.base_url, KEY) as http:
        begun = await http.post("/v1/runs", json={"model": "hermes-agent", "input": "first"})
        assert begun.status_code == 202, begun.text
        run_id = begun.json()["id"]
        await started(simulator, served)
        steered = await http.post(f"/v1/runs/{run_id}/steer", json={"input": STEER})
        assert await until(lambda: _ended(http, run_id), server=served), (
            "the steered run did not end"
        )
        after = await http.post(f"/v1/runs/{run_id}/steer", json={"input": STEER})
        events = sse_data((await http.get(f"/v1/runs/{run_id}/events")).text)

    assert steered.status_code == 202, steered.text
    assert steered.json() == {
        "id": run_id,
        "object": "hermes.run",
        "status": "running",
        "steered": True,
    }
    assert said(simulator, 1)[-1] == STEER
    assert [(e["text"], e["applied"]) for e in events if e["kind"] == "steered"] == [(STEER, True)]
    stored = [e["message"] for e in events if e["kind"] == "message_added"]
    assert {"role": "user", "content": STEER} in stored
    assert after.status_code == 409
    assert after.json()["error"]["code"] == "run_not_running"


async def test_another_keys_run_cannot_be_steered(
    simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow())
    async with http_client(served.base_url, KEY) as http:
        begun = await http.post("/v1/runs", json={"model": "hermes-agent", "input": "first"})
        run_id = begun.json()["id"]
        await started(simulator, served)
        async with http_client(served.base_url, OTHER_KEY) as other:
            refused = await other.post(f"/v1/runs/{run_id}/steer", json={"input": STEER})
        await http.post(f"/v1/runs/{run_id}/stop")

    assert refused.status_code == 404
    assert len(simulator.state.requests(scenario=MODEL)) == 1


async def test_a_run_started_with_session_busy_steer_answers_with_the_running_run(
    simulator: SimulatorServer, served: Served
) -> None:
    script(simulator, MODEL, slow(), answer("Words, and pineapple."))
    body = {"model": "hermes-agent", "session": f"runs-{uuid.uuid4().hex[:8]}"}
    async with http_client(served.base_url, KEY) as http:
        first = await http.post("/v1/runs", json={**body, "input": "first"})
        await started(simulator, served)
        steered = await http.post(
            "/v1/runs", json={**body, "input": STEER, "session_busy": "steer"}
        )
        assert await until(lambda: _ended(http, first.json()["id"]), server=served)

    assert steered.status_code == 202, steered.text
    assert steered.json()["id"] == first.json()["id"]
    assert said(simulator, 1)[-1] == STEER


async def _ended(http: httpx.AsyncClient, run_id: str) -> bool:
    found = await http.get(f"/v1/runs/{run_id}")
    return found.status_code == 200 and found.json()["ended_at"] is not None
