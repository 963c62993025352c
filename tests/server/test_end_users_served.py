"""Two Open WebUI users behind one trusted key, against a real ``serve`` process
(docs/end-users.md): neither sees the other's memory, sessions, session_search hits, workspace
files or uploads, and each has their own run limit (``limits.runs_per_user``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
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
    tool_results_of,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "end-users-upstream"
KEY = "sk-front-end-0123456789abcdef"
MODEL = "team-agent"

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: webui, trusted_front_end: true}}
limits:
  runs_per_user: 1
providers:
{provider}profiles:
  - id: {model}
    providers: [sim]
    tools: [files]
"""


def openwebui(user: str, chat: str) -> dict[str, str]:
    """What Open WebUI sends with ENABLE_FORWARD_USER_INFO_HEADERS."""
    return {
        "x-openwebui-user-id": user,
        "x-openwebui-user-name": user.title(),
        "x-openwebui-user-email": f"{user}@example.com",
        "x-openwebui-user-role": "user",
        "x-openwebui-chat-id": chat,
    }


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("end-users")
    config = CONFIG.format(
        data=data,
        key=KEY,
        provider=simulated_provider(_simulator_server, UPSTREAM),
        model=MODEL,
    )
    with serving(data, config) as server:
        yield server


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, KEY) as client:
        yield client


def body(text: str, *, stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": stream}


async def say(http: httpx.AsyncClient, text: str, headers: dict[str, str]) -> str:
    response = await http.post("/v1/chat/completions", json=body(text), headers=headers)
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


async def test_two_open_webui_users_see_neither_each_other_s_memory_sessions_hits_nor_files(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    ann, ben = openwebui("ann", "chat-1"), openwebui("ben", "chat-1")  # the same chat id
    script(
        simulator,
        UPSTREAM,
        call("memory", action="add", target="user", content="Ann flies to Zanzibar."),
        call("write_file", path="plan.txt", content="Ann's itinerary"),
        answer("Noted."),
    )
    assert (await say(http, "plan my zanzibar trip", ann)).startswith("Noted.")
    uploaded = await http.post(
        "/v1/files",
        files={"file": ("passport.txt", b"Ann's passport")},
        data={"purpose": "user_data"},
        headers=openwebui("ann", "chat-1"),
    )
    assert uploaded.status_code == 200, uploaded.text
    passport = uploaded.json()["id"]

    # Ben, in a chat of the same id: his own session, memory and workspace.
    script(
        simulator,
        UPSTREAM,
        call("session_search", query="zanzibar"),
        call("read_file", path="plan.txt"),
        answer("Nothing of yours."),
    )
    assert await say(http, "what are my travel plans?", ben) == "Nothing of yours."
    seen_by_ben = json.dumps(last_messages(simulator, UPSTREAM))
    assert "Zanzibar" not in last_messages(simulator, UPSTREAM)[0]["content"]  # no memory
    searched, read = tool_results_of(simulator, UPSTREAM)
    assert searched.startswith("No sessions matched")
    assert read.startswith("Error")
    assert "itinerary" not in seen_by_ben
    assert "plan my zanzibar trip" not in seen_by_ben  # not Ann's session continued
    bens_files = await http.get("/v1/workspaces/chat-1/files", headers=ben)
    assert "plan.txt" not in json.dumps(bens_files.json())
    assert (await http.get(f"/v1/files/{passport}", headers=ben)).status_code == 404
    listed = (await http.get("/v1/files", headers=ben)).json()["data"]
    assert passport not in [f["id"] for f in listed]

    # Ann, in a new chat: her memory, her earlier session found, her workspace listed.
    script(simulator, UPSTREAM, call("session_search", query="zanzibar"), answer("Found it."))
    assert await say(http, "where was I going?", openwebui("ann", "chat-2")) == "Found it."
    assert "Ann flies to Zanzibar." in last_messages(simulator, UPSTREAM)[0]["content"]
    (hits,) = tool_results_of(simulator, UPSTREAM)
    assert "plan my zanzibar trip" in hits
    anns_files = await http.get("/v1/workspaces/chat-1/files", headers=ann)
    assert "plan.txt" in json.dumps(anns_files.json())
    assert (await http.get(f"/v1/files/{passport}", headers=ann)).status_code == 200


async def test_an_open_webui_user_at_their_run_limit_is_refused_while_another_starts(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    slow = Step(reply=Reply(text="slow " * 20, chunk_count=20), fault=Fault(chunk_delay=0.1))
    script(simulator, UPSTREAM, slow, slow)
    ann, ben = openwebui("ann", "chat-3"), openwebui("ben", "chat-4")
    held = await http.send(
        http.build_request(
            "POST", "/v1/chat/completions", json=body("go", stream=True), headers=ann
        ),
        stream=True,
    )
    try:
        assert held.status_code == 200
        again = await http.post(
            "/v1/chat/completions", json=body("again"), headers=openwebui("ann", "chat-5")
        )
        assert again.status_code == 429, again.text
        assert "end user" in again.json()["error"]["message"]
        started = await http.send(
            http.build_request(
                "POST", "/v1/chat/completions", json=body("go", stream=True), headers=ben
            ),
            stream=True,
        )
        assert started.status_code == 200
        await started.aclose()
    finally:
        await held.aclose()
