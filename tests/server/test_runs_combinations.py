"""``POST /v1/runs`` (and crons, which start runs the same way) with the Responses features its
docs say it takes, against a real ``serve`` process: input items naming an earlier response's
item by reference, a run steered into its session's running run, the session names a run may
give, and the session header naming where a run's files are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.server.served import (
    Served,
    answer,
    call,
    http_client,
    last_messages,
    script,
    serving,
    simulated_provider,
    until,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

KEY = "sk-runs-combinations-0123456789"
UPSTREAM = "runs-combinations-upstream"


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    config = (
        f"server:\n  api_keys: [{{principal: alice, key: {KEY}}}]\n"
        f"providers:\n{simulated_provider(_simulator_server, UPSTREAM)}"
        "profiles:\n  - {id: hermes-agent, providers: [sim]}\n"
        "  - {id: hermes-files, providers: [sim], tools: [files]}\n"
    )
    with serving(tmp_path_factory.mktemp("runs-combinations"), config) as running:
        yield running


async def _ended(http: httpx.AsyncClient, run_id: str, served: Served) -> dict[str, Any]:
    async def ended() -> bool:
        return bool((await http.get(f"/v1/runs/{run_id}")).json()["ended_at"])

    assert await until(ended, server=served)
    found: dict[str, Any] = (await http.get(f"/v1/runs/{run_id}")).json()
    return found


async def _answered(http: httpx.AsyncClient, said: str) -> str:
    """The id of the answer's message item of a stored response to ``said``."""
    response = await http.post("/v1/responses", json={"model": "hermes-agent", "input": said})
    assert response.status_code == 200, response.text
    item_id: str = response.json()["output"][-1]["id"]
    return item_id


async def test_a_runs_input_items_may_name_an_earlier_responses_item_by_reference(
    served: Served, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, answer("Paris is the capital."), answer("Paris, again."))
    async with http_client(served.base_url, KEY) as http:
        item_id = await _answered(http, "Which is the capital?")
        started = await http.post(
            "/v1/runs",
            json={
                "model": "hermes-agent",
                "input": [
                    {"type": "item_reference", "id": item_id},
                    {"role": "user", "content": "Say it again."},
                ],
            },
        )
        assert started.status_code == 202, started.text
        assert (await _ended(http, started.json()["id"], served))["status"] == "completed"
        unknown = await http.post(
            "/v1/runs",
            json={"model": "hermes-agent", "input": [{"type": "item_reference", "id": "msg_x_0"}]},
        )
    said = [(m["role"], m["content"]) for m in last_messages(simulator, UPSTREAM)[1:]]
    assert said[-2:] == [("assistant", "Paris is the capital."), ("user", "Say it again.")]
    assert unknown.status_code == 400
    assert unknown.json()["error"]["param"] == "input"


async def test_a_cron_keeps_the_item_its_input_names_by_reference(
    served: Served, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, answer("Paris is the capital."))
    async with http_client(served.base_url, KEY) as http:
        item_id = await _answered(http, "Which is the capital?")
        made = await http.post(
            "/v1/crons",
            json={
                "schedule": "0 3 * * *",
                "model": "hermes-agent",
                "input": [
                    {"type": "item_reference", "id": item_id},
                    {"role": "user", "content": "Is it still?"},
                ],
            },
        )
        assert made.status_code == 200, made.text
        assert (await http.delete(f"/v1/crons/{made.json()['id']}")).status_code == 200
    kept, asked = made.json()["input"]
    assert (kept["id"], kept["role"]) == (item_id, "assistant")
    assert kept["content"][0]["text"] == "Paris is the capital."
    assert asked == {"role": "user", "content": "Is it still?"}


async def test_a_run_steered_into_its_sessions_running_run_is_answered_with_that_run_as_it_is(
    served: Served, simulator: SimulatorServer
) -> None:
    held = Step(reply=Reply(text="Read."), fault=Fault(first_byte_delay=60))
    script(simulator, UPSTREAM, held)
    async with http_client(served.base_url, KEY) as http:
        running = await http.post(
            "/v1/runs",
            json={
                "model": "hermes-agent",
                "input": "Read the logs.",
                "session": "steered",
                "metadata": {"job": "nightly"},
            },
        )
        assert running.status_code == 202, running.text
        assert await until(lambda: bool(simulator.state.requests(scenario=UPSTREAM)), server=served)
        steered = await http.post(
            "/v1/runs",
            json={
                "model": "hermes-agent",
                "input": "And the errors.",
                "session": "steered",
                "session_busy": "steer",
                "metadata": {"job": "other"},
            },
        )
        shown = (await http.get(f"/v1/runs/{running.json()['id']}")).json()
        assert (await http.post(f"/v1/runs/{shown['id']}/stop")).status_code == 202
    assert steered.status_code == 202, steered.text
    assert steered.headers["x-hermes-steered-into"] == shown["id"]
    answered = steered.json()
    assert (answered["id"], answered["metadata"]) == (shown["id"], {"job": "nightly"})


@pytest.mark.parametrize("name", ["two\nlines", "\tindented", "x" * 257])
@pytest.mark.parametrize("route", ["/v1/runs", "/v1/crons"])
async def test_a_session_name_the_sessions_routes_could_not_name_is_a_400(
    served: Served, route: str, name: str
) -> None:
    body = {"model": "hermes-agent", "input": "Hello.", "session": name, "schedule": "@daily"}
    if route == "/v1/runs":
        del body["schedule"]
    async with http_client(served.base_url, KEY) as http:
        refused = await http.post(route, json=body)
        sessions = (await http.get("/v1/runs", params={"session": name[:256]})).json()["data"]
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "session"
    assert sessions == []


@pytest.mark.parametrize("joins", ["session", "conversation"])
async def test_the_session_header_of_a_run_names_where_its_files_are(
    served: Served, simulator: SimulatorServer, joins: str
) -> None:
    script(
        simulator, UPSTREAM, call("write_file", path="report.txt", content="ok"), answer("Done.")
    )
    async with http_client(served.base_url, KEY) as http:
        if joins == "session":
            named = "reports"
        else:
            named = (await http.post("/v1/conversations", json={})).json()["id"]
        started = await http.post(
            "/v1/runs", json={"model": "hermes-files", "input": "Write it.", joins: named}
        )
        assert started.status_code == 202, started.text
        assert (await _ended(http, started.json()["id"], served))["status"] == "completed"
        header = started.headers["x-hermes-session-id"]
        files = await http.get(f"/v1/workspaces/{header}/files")
    assert files.status_code == 200, files.text
    assert [f["path"] for f in files.json()["data"]] == ["report.txt"]
    assert header == named


async def test_the_session_header_of_a_response_in_a_conversation_names_where_its_files_are(
    served: Served, simulator: SimulatorServer
) -> None:
    script(simulator, UPSTREAM, call("write_file", path="notes.txt", content="ok"), answer("Done."))
    async with http_client(served.base_url, KEY) as http:
        conversation = (await http.post("/v1/conversations", json={})).json()["id"]
        body = {"model": "hermes-files", "input": "Write it.", "conversation": conversation}
        answered = await http.post("/v1/responses", json=body)
        assert answered.status_code == 200, answered.text
        header = answered.headers["x-hermes-session-id"]
        files = await http.get(f"/v1/workspaces/{header}/files")
    assert header == conversation
    assert files.status_code == 200, files.text
    assert [f["path"] for f in files.json()["data"]] == ["notes.txt"]
