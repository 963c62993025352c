"""What end users behind one trusted key own, in process (docs/end-users.md): uploads (and the
files a message names), stored responses, conversations, skills the agent writes, recalled
episodes. Two end users never see each other's; a request naming no end user sees the key's
own only."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store, sqlite_url
from hermes_core.skills.shelf import DirectorySkills
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

ANN = {"x-hermes-memory-scope": "ann"}
BEN = {"x-hermes-memory-scope": "ben"}
KEY = dict[str, str]()
"""No end user named: the key's own."""


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def text(reply: str) -> Step:
    return Step(reply=Reply(text=reply))


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadedServer, Services]]:
    root = tmp_path_factory.mktemp("end-users-data")
    services = make_services(
        _simulator_server, database_url=sqlite_url(root / "hermes.db"), files_dir=root / "files"
    )
    services.profiles = [
        dataclasses.replace(profile, skills=DirectorySkills(), skills_approval=False)
        for profile in services.profiles
    ]
    with ThreadedServer(create_app(services)) as server:
        yield server, services


@pytest.fixture
async def http(served: tuple[ThreadedServer, Services]) -> AsyncIterator[httpx.AsyncClient]:
    server, _ = served
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=server.base_url, headers=auth, timeout=30
    ) as client:
        yield client


@pytest.fixture
async def store(served: tuple[ThreadedServer, Services]) -> AsyncIterator[Store]:
    _, services = served
    assert services.database_url is not None
    opened = await Store.open(services.database_url, migrate=False)
    yield opened
    await opened.close()


async def upload(http: httpx.AsyncClient, name: str, headers: dict[str, str]) -> str:
    response = await http.post(
        "/v1/files",
        files={"file": (name, f"{name} contents".encode())},
        data={"purpose": "user_data"},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    file_id: str = response.json()["id"]
    return file_id


async def listed(http: httpx.AsyncClient, headers: dict[str, str]) -> set[str]:
    response = await http.get("/v1/files", headers=headers)
    assert response.status_code == 200, response.text
    return {f["filename"] for f in response.json()["data"]}


def chat_with_file(file_id: str) -> dict[str, Any]:
    part = {"type": "file", "file": {"file_id": file_id}}
    content = [{"type": "text", "text": "read this"}, part]
    return {"model": "hermes-agent", "messages": [{"role": "user", "content": content}]}


async def test_an_end_user_sees_their_own_and_the_key_s_uploads_never_another_s(
    http: httpx.AsyncClient, store: Store
) -> None:
    anns = await upload(http, "ann.txt", ANN)
    await upload(http, "ben.txt", BEN)
    shared = await upload(http, "shared.txt", KEY)
    assert {"ann.txt", "shared.txt"} <= await listed(http, ANN)
    assert "ben.txt" not in await listed(http, ANN)
    assert "ann.txt" not in await listed(http, BEN)
    assert {"ann.txt", "ben.txt"}.isdisjoint(await listed(http, KEY))
    assert (await http.get(f"/v1/files/{anns}", headers=BEN)).status_code == 404
    assert (await http.get(f"/v1/files/{anns}/content", headers=KEY)).status_code == 404
    assert (await http.get(f"/v1/files/{shared}/content", headers=ANN)).status_code == 200
    # Seeing the key's file is not owning it: only the key deletes it, only Ann hers.
    assert (await http.delete(f"/v1/files/{shared}", headers=ANN)).status_code == 404
    assert (await http.delete(f"/v1/files/{anns}", headers=BEN)).status_code == 404
    assert (await http.delete(f"/v1/files/{anns}", headers=ANN)).status_code == 200
    record = await store.files.get("alice", shared)
    assert record is not None
    assert record.end_user is None


async def test_a_message_naming_another_end_user_s_upload_is_a_404(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    bens = await upload(http, "ben-notes.txt", BEN)
    refused = await http.post("/v1/chat/completions", json=chat_with_file(bens), headers=ANN)
    assert refused.status_code == 404, refused.text
    assert refused.json()["error"]["code"] == "file_not_found"
    script(simulator, text("Read it."))
    read = await http.post("/v1/chat/completions", json=chat_with_file(bens), headers=BEN)
    assert read.status_code == 200, read.text
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert "ben-notes.txt contents" in str(sent)


async def respond(
    http: httpx.AsyncClient, headers: dict[str, str], **fields: Any
) -> httpx.Response:
    body = {"model": "hermes-agent", "input": "hello", **fields}
    return await http.post("/v1/responses", json=body, headers=headers)


async def test_an_end_user_s_response_is_a_404_to_another_and_to_the_key(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(simulator, text("Hi Ann."), text("Still Ann."))
    made = await respond(http, ANN)
    assert made.status_code == 200, made.text
    response_id = made.json()["id"]
    stored = await store.responses.get("alice", response_id)
    assert stored is not None
    assert stored.end_user == "ann"
    for other in (BEN, KEY):
        assert (await http.get(f"/v1/responses/{response_id}", headers=other)).status_code == 404
        items = await http.get(f"/v1/responses/{response_id}/input_items", headers=other)
        assert items.status_code == 404
        assert (await http.delete(f"/v1/responses/{response_id}", headers=other)).status_code == 404
        continued = await respond(http, other, previous_response_id=response_id)
        assert continued.status_code == 400
        assert continued.json()["error"]["code"] == "previous_response_not_found"
    assert (await http.get(f"/v1/responses/{response_id}", headers=ANN)).status_code == 200
    # The body's safety_identifier names Ann as well as the header does.
    again = await respond(http, KEY, previous_response_id=response_id, safety_identifier="ann")
    assert again.status_code == 200, again.text


async def test_an_end_user_sees_only_their_own_runs_and_the_key_sees_all(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, text("Hi Ann."), text("Hi Ben."))
    ann = await respond(http, ANN)
    ben = await respond(http, BEN)
    assert ann.status_code == ben.status_code == 200, (ann.text, ben.text)
    ann_run, ben_run = ann.headers["x-hermes-run-id"], ben.headers["x-hermes-run-id"]
    assert (await http.get(f"/v1/runs/{ann_run}", headers=ANN)).json()["end_user"] == "ann"
    for path in (f"/v1/runs/{ann_run}", f"/v1/runs/{ann_run}/events"):
        refused = await http.get(path, headers=BEN)
        assert refused.status_code == 404, path
        assert refused.json()["error"]["code"] == "run_not_found"
    stopped = await http.post(f"/v1/runs/{ann_run}/stop", headers=BEN)
    assert stopped.status_code == 404
    listed = (await http.get("/v1/runs", params={"limit": 100}, headers=BEN)).json()["data"]
    assert ben_run in {run["id"] for run in listed}
    assert {run["end_user"] for run in listed} == {"ben"}
    everyone = (await http.get("/v1/runs", params={"limit": 100}, headers=KEY)).json()["data"]
    assert {ann_run, ben_run} <= {run["id"] for run in everyone}
    assert (await http.get(f"/v1/runs/{ann_run}", headers=KEY)).status_code == 200


async def test_an_end_user_s_conversation_is_a_404_to_another_and_to_the_key(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    # (An end user may take turns in a conversation of the key's own: their items in it are
    # their own session's. Another end user's conversation they never see.)
    created = await http.post("/v1/conversations", json={"metadata": {}}, headers=ANN)
    assert created.status_code == 200, created.text
    conversation = created.json()["id"]
    record = await store.conversations.get("alice", conversation)
    assert record is not None
    assert record.end_user == "ann"
    for other in (BEN, KEY):
        assert (
            await http.get(f"/v1/conversations/{conversation}", headers=other)
        ).status_code == 404
        items = await http.get(f"/v1/conversations/{conversation}/items", headers=other)
        assert items.status_code == 404
        turn = await respond(http, other, conversation=conversation)
        assert turn.status_code == 404
    script(simulator, text("In your conversation."))
    assert (await respond(http, ANN, conversation=conversation)).status_code == 200


async def test_only_the_key_changes_or_deletes_its_own_conversation(
    http: httpx.AsyncClient,
) -> None:
    created = await http.post("/v1/conversations", json={"metadata": {}}, headers=KEY)
    conversation = created.json()["id"]
    assert (await http.get(f"/v1/conversations/{conversation}", headers=ANN)).status_code == 200
    renamed = await http.post(
        f"/v1/conversations/{conversation}", json={"metadata": {"a": "b"}}, headers=ANN
    )
    assert renamed.status_code == 404
    assert (await http.delete(f"/v1/conversations/{conversation}", headers=ANN)).status_code == 404
    assert (await http.delete(f"/v1/conversations/{conversation}", headers=KEY)).status_code == 200


def write_skill(name: str) -> Step:
    arguments = {"action": "create", "name": name, "description": f"{name} trick", "body": "Do it."}
    return Step(reply=Reply(tool_calls=[ToolCallSpec(name="skill_manage", arguments=arguments)]))


async def system_prompt_of_a_new_chat(
    simulator: SimulatorServer, http: httpx.AsyncClient, headers: dict[str, str]
) -> str:
    script(simulator, text("Hello."))
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]}
    assert (await http.post("/v1/chat/completions", json=body, headers=headers)).status_code == 200
    prompt: str = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"][0][
        "content"
    ]
    return prompt


async def test_a_skill_the_agent_writes_for_an_end_user_is_theirs_and_the_key_s_are_shared(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "learn"}]}
    script(simulator, write_skill("ann-trick"), text("Learned."))
    assert (await http.post("/v1/chat/completions", json=body, headers=ANN)).status_code == 200
    script(simulator, write_skill("team-trick"), text("Learned."))
    assert (await http.post("/v1/chat/completions", json=body, headers=KEY)).status_code == 200
    assert [s.name for s in await store.skills.published("alice/ann")] == ["ann-trick"]
    assert [s.name for s in await store.skills.published("alice")] == ["team-trick"]
    anns = await system_prompt_of_a_new_chat(simulator, http, ANN)
    bens = await system_prompt_of_a_new_chat(simulator, http, BEN)
    keys = await system_prompt_of_a_new_chat(simulator, http, KEY)
    assert "ann-trick" in anns
    assert "team-trick" in anns
    assert "ann-trick" not in bens
    assert "team-trick" in bens
    assert "ann-trick" not in keys
