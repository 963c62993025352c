"""``DELETE /v1/sessions/{name}`` and ``DELETE /v1/conversations/{id}`` against an in-process
server: a conversation goes with every branch, transcript, task list, approval and its
workspace on disk; only the caller's (or its end user's); never while a run holds it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, insert, select

from hermes_core.persistence import Store, sqlite_url
from hermes_core.persistence.retention import APPROVALS, TODOS
from hermes_core.persistence.sessions import LOCKS, MESSAGES, SESSIONS
from server.app import create_app
from server.files.workspace_changes import container_record
from server.files.workspaces import conversation_workspace
from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services


@pytest.fixture
def served(simulator: SimulatorServer, tmp_path: Path) -> Iterator[ThreadedServer]:
    services = make_services(
        simulator,
        database_url=sqlite_url(tmp_path / "hermes.db"),
        workspaces_dir=tmp_path / "workspaces",
    )
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(served: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=served.base_url, timeout=30) as client:
        yield client


@pytest.fixture
async def store(tmp_path: Path, served: ThreadedServer) -> AsyncIterator[Store]:
    opened = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=False)
    yield opened
    await opened.close()


def answers(simulator: SimulatorServer, *texts: str) -> None:
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text=text)) for text in texts])
    )


async def chat(
    http: httpx.AsyncClient,
    messages: list[dict[str, Any]],
    session: str,
    *,
    key: str = KEY_ALICE,
    scope: str | None = None,
) -> None:
    headers = {"authorization": f"Bearer {key}", "x-hermes-session-id": session}
    if scope is not None:
        headers["x-hermes-memory-scope"] = scope
    response = await http.post(
        "/v1/chat/completions",
        json={"model": "hermes-agent", "messages": messages},
        headers=headers,
    )
    assert response.status_code == 200, response.text


async def delete(
    http: httpx.AsyncClient, name: str, *, key: str = KEY_ALICE, scope: str | None = None
) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    if scope is not None:
        headers["x-hermes-memory-scope"] = scope
    return await http.delete(f"/v1/sessions/{name}", headers=headers)


def workspace_with_a_file(tmp_path: Path, owner: str, name: str) -> Path:
    root = conversation_workspace(tmp_path / "workspaces", owner, name)
    (root / "out").mkdir(parents=True)
    (root / "out" / "report.txt").write_text("made by the agent")
    container_record(root).write_text(json.dumps({"conversation": name}))
    return root


async def count(store: Store, table: Any, *where: Any) -> int:
    async with store.db.engine.connect() as conn:
        return int(
            (await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one()
        )


async def add_todo_and_approval(store: Store, owner: str, name: str) -> None:
    async with store.db.engine.connect() as conn:
        session_id = (
            await conn.execute(
                select(SESSIONS.c.id).where(SESSIONS.c.owner == owner, SESSIONS.c.name == name)
            )
        ).scalar()
    now = time.time()
    async with store.db.engine.begin() as conn:
        await conn.execute(insert(TODOS).values(session_id=session_id, items=[], updated_at=now))
        await conn.execute(
            insert(APPROVALS).values(
                id=f"appr_{name}_{owner.replace('/', '_')}",
                owner=owner.split("/")[0],
                conversation_owner=owner,
                conversation=name,
                session_id=None,
                run_id="run_x",
                profile="hermes-agent",
                call_id="call_1",
                tool="shell",
                arguments={},
                reason="asks",
                status="approved",
                scope="session",
                created_at=now,
                expires_at=now,
            )
        )


async def test_deleting_a_session_deletes_every_branch_its_rows_and_its_workspace(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    answers(simulator, "One.", "Two.", "Other.", "Bob's.")
    await chat(http, [{"role": "user", "content": "first"}], "chat-1")
    # An edited first message forks a second branch of the same conversation.
    await chat(http, [{"role": "user", "content": "first, edited"}], "chat-1")
    await chat(http, [{"role": "user", "content": "elsewhere"}], "chat-2")
    await chat(http, [{"role": "user", "content": "bob here"}], "chat-1", key=KEY_BOB)
    await add_todo_and_approval(store, "alice", "chat-1")
    workspace = workspace_with_a_file(tmp_path, "alice", "chat-1")
    kept_workspace = workspace_with_a_file(tmp_path, "alice", "chat-2")
    assert (
        await count(store, SESSIONS, SESSIONS.c.owner == "alice", SESSIONS.c.name == "chat-1") == 2
    )

    response = await delete(http, "chat-1")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "hermes.session.deleted"
    assert body["deleted"] is True
    assert body["sessions"] == 2
    assert body["messages"] >= 4
    assert body["workspace"] is True
    assert (
        await count(store, SESSIONS, SESSIONS.c.owner == "alice", SESSIONS.c.name == "chat-1") == 0
    )
    assert await count(store, MESSAGES, MESSAGES.c.session_id.not_in(select(SESSIONS.c.id))) == 0
    assert await count(store, TODOS, TODOS.c.session_id.not_in(select(SESSIONS.c.id))) == 0
    assert await count(store, APPROVALS, APPROVALS.c.conversation == "chat-1") == 0
    assert await count(store, LOCKS) == 0
    assert not workspace.exists()
    assert not container_record(workspace).exists()
    # What is not that conversation of that owner stays.
    assert (
        await count(store, SESSIONS, SESSIONS.c.owner == "alice", SESSIONS.c.name == "chat-2") == 1
    )
    assert await count(store, SESSIONS, SESSIONS.c.owner == "bob", SESSIONS.c.name == "chat-1") == 1
    assert (kept_workspace / "out" / "report.txt").read_text() == "made by the agent"
    # Gone: a second delete finds nothing.
    assert (await delete(http, "chat-1")).status_code == 404


async def test_an_end_users_session_is_deleted_apart_from_the_keys_own(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    answers(simulator, "Key's.", "User's.")
    await chat(http, [{"role": "user", "content": "mine"}], "chat-1")
    await chat(http, [{"role": "user", "content": "theirs"}], "chat-1", scope="u-7")
    theirs = workspace_with_a_file(tmp_path, "alice/u-7", "chat-1")
    mine = workspace_with_a_file(tmp_path, "alice", "chat-1")

    response = await delete(http, "chat-1", scope="u-7")

    assert response.status_code == 200, response.text
    assert await count(store, SESSIONS, SESSIONS.c.owner == "alice/u-7") == 0
    assert (
        await count(store, SESSIONS, SESSIONS.c.owner == "alice", SESSIONS.c.name == "chat-1") == 1
    )
    assert not theirs.exists()
    assert mine.is_dir()


async def test_a_session_whose_run_holds_it_is_not_deleted(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    answers(simulator, "Hi.")
    await chat(http, [{"role": "user", "content": "hi"}], "chat-busy")
    workspace = workspace_with_a_file(tmp_path, "alice", "chat-busy")
    assert await store.sessions.lock("alice", "chat-busy", "run_live", lease_seconds=60)

    response = await delete(http, "chat-busy")

    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "session_busy"
    assert await count(store, SESSIONS, SESSIONS.c.name == "chat-busy") == 1
    assert workspace.is_dir()


async def test_deleting_no_session_is_a_404_and_a_bad_name_a_400(http: httpx.AsyncClient) -> None:
    missing = await delete(http, "never-was")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "session_not_found"
    too_long = await delete(http, "x" * 300)
    assert too_long.status_code == 400
    assert too_long.json()["error"]["param"] == "name"
    untrusted = await delete(http, "chat-1", key=KEY_BOB, scope="u-1")
    assert untrusted.status_code == 403


async def test_deleting_a_conversation_removes_its_workspace(
    simulator: SimulatorServer, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    created = await http.post("/v1/conversations", json={}, headers=headers)
    conversation = created.json()["id"]
    answers(simulator, "Hello.")
    turn = await http.post(
        "/v1/responses",
        json={"model": "hermes-agent", "input": "hi", "conversation": conversation},
        headers=headers,
    )
    assert turn.status_code == 200, turn.text
    workspace = workspace_with_a_file(tmp_path, "alice", conversation)

    deleted = await http.delete(f"/v1/conversations/{conversation}", headers=headers)

    assert deleted.status_code == 200, deleted.text
    assert not workspace.exists()
