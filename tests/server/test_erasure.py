"""The admin routes against an in-process server: only an admin key may sweep or erase, bad
input is a 400 and nobody a 404 (OpenAI-style envelopes); the sweep route deletes what is
past retention; erasing an end user leaves no row or file of theirs and every other."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import update

from hermes_core.persistence import Store, sqlite_url
from hermes_core.persistence.sessions import SESSIONS
from server.app import create_app
from server.files.uploads import FileLimits, FileVault
from server.files.workspaces import conversation_workspace
from server.http.auth import KeyRing, Principal
from server.http.threaded import ThreadedServer
from server.retention.policy import RetentionPolicy, Rule
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.persistence.test_retention import end_user_rows, rows_mentioning
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

KEY_ADMIN = "sk-admin-0123456789abcdef"
DAY = 86400.0
LIMITS = FileLimits(max_file_bytes=1024, quota_bytes=1024, max_files=10)


@pytest.fixture
def served(simulator: SimulatorServer, tmp_path: Path) -> Iterator[ThreadedServer]:
    services = make_services(
        simulator,
        database_url=sqlite_url(tmp_path / "hermes.db"),
        workspaces_dir=tmp_path / "workspaces",
        files_dir=tmp_path / "files",
        keyring=KeyRing(
            {
                KEY_ALICE: Principal("alice", trusted_front_end=True),
                KEY_BOB: "bob",
                KEY_ADMIN: Principal("ops", admin=True),
            }
        ),
        retention=RetentionPolicy(sessions=Rule(days=30)),
    )
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(served: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=served.base_url, timeout=60) as client:
        yield client


@pytest.fixture
async def store(tmp_path: Path, served: ThreadedServer) -> AsyncIterator[Store]:
    opened = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=False)
    yield opened
    await opened.close()


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_admin_routes_refuse_a_key_that_is_not_an_admin(http: httpx.AsyncClient) -> None:
    for key in (KEY_ALICE, KEY_BOB):
        swept = await http.post("/v1/admin/retention/sweep", headers=auth(key))
        erased = await http.delete("/v1/admin/end_users/u1?key=alice", headers=auth(key))
        for refused in (swept, erased):
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "admin_key_required"
    assert (await http.post("/v1/admin/retention/sweep")).status_code == 401


async def test_an_erasure_of_bad_input_is_a_400_and_of_nobody_a_404(
    http: httpx.AsyncClient,
) -> None:
    no_key = await http.delete("/v1/admin/end_users/u1", headers=auth(KEY_ADMIN))
    assert no_key.status_code == 400
    assert no_key.json()["error"]["param"] == "key"
    scoped_key = await http.delete("/v1/admin/end_users/u1?key=alice/x", headers=auth(KEY_ADMIN))
    assert scoped_key.status_code == 400
    too_long = await http.delete(
        f"/v1/admin/end_users/{'u' * 300}?key=alice", headers=auth(KEY_ADMIN)
    )
    assert too_long.status_code == 400
    assert too_long.json()["error"]["param"] == "end_user"
    nobody = await http.delete("/v1/admin/end_users/nobody?key=alice", headers=auth(KEY_ADMIN))
    assert nobody.status_code == 404
    assert nobody.json()["error"]["code"] == "end_user_not_found"


async def test_the_sweep_route_deletes_sessions_past_retention_and_keeps_fresh_ones(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Hi."), repeat=2)])
    )
    for name in ("old-chat", "new-chat"):
        turn = await http.post(
            "/v1/chat/completions",
            json={"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]},
            headers={**auth(KEY_ALICE), "x-hermes-session-id": name},
        )
        assert turn.status_code == 200, turn.text
    old = conversation_workspace(tmp_path / "workspaces", "alice", "old-chat")
    new = conversation_workspace(tmp_path / "workspaces", "alice", "new-chat")
    for workspace in (old, new):
        workspace.mkdir(parents=True)
        (workspace / "notes.md").write_text("notes")
    async with store.db.engine.begin() as conn:
        await conn.execute(
            update(SESSIONS)
            .where(SESSIONS.c.name == "old-chat")
            .values(updated_at=time.time() - 31 * DAY)
        )

    swept = await http.post("/v1/admin/retention/sweep", headers=auth(KEY_ADMIN))

    assert swept.status_code == 200, swept.text
    body = swept.json()
    assert body["object"] == "hermes.retention.sweep"
    assert body["deleted"]["sessions"] == 1
    assert body["deleted"]["workspaces"] == 1
    assert not old.exists()
    assert (new / "notes.md").is_file()
    assert not await store.retention.has_conversation("alice", "old-chat")
    assert await store.retention.has_conversation("alice", "new-chat")


async def test_erasing_an_end_user_leaves_no_row_or_file_of_theirs(
    http: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    now = time.time()
    theirs = await end_user_rows(store, "alice", "u1", at=now)
    kept = await end_user_rows(store, "alice", "u2", at=now)
    files = tmp_path / "files"
    workspaces = tmp_path / "workspaces"
    paths = {}
    for user, rows in (("u1", theirs), ("u2", kept)):
        workspace = conversation_workspace(workspaces, f"alice/{user}", rows["name"])
        workspace.mkdir(parents=True)
        (workspace / "draft.txt").write_text(f"{user}'s draft")
        record = await store.files.get("alice", rows["file"])
        assert record is not None
        upload = FileVault(files, store, LIMITS).path(record)
        upload.parent.mkdir(parents=True, exist_ok=True)
        upload.write_bytes(b"bytes")
        paths[user] = (workspace, upload)

    erased = await http.delete("/v1/admin/end_users/u1?key=alice", headers=auth(KEY_ADMIN))

    assert erased.status_code == 200, erased.text
    body = erased.json()
    assert body["object"] == "hermes.end_user.erased"
    assert body["key"] == "alice"
    assert body["end_user"] == "u1"
    assert body["deleted"]["sessions"] == 1
    assert body["deleted"]["workspaces"] == 1
    assert body["deleted"]["file_bytes"] == 1
    assert await rows_mentioning(store.db, "alice/u1") == []
    assert not paths["u1"][0].exists()
    assert not paths["u1"][1].exists()
    assert paths["u2"][0].joinpath("draft.txt").read_text() == "u2's draft"
    assert paths["u2"][1].read_bytes() == b"bytes"
    assert await rows_mentioning(store.db, "alice/u2") != []
    again = await http.delete("/v1/admin/end_users/u1?key=alice", headers=auth(KEY_ADMIN))
    assert again.status_code == 404


async def test_an_erased_end_users_runs_are_forgotten_by_the_server_that_ran_them(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # The run manager keeps finished runs' events for replays: an erasure drops them too.
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Hi u3."))]))
    answered = await http.post(
        "/v1/chat/completions",
        json={"model": "hermes-agent", "messages": [{"role": "user", "content": "hello"}]},
        headers={**auth(KEY_ALICE), "x-hermes-memory-scope": "u3"},
    )
    assert answered.status_code == 200, answered.text
    run_id = answered.headers["x-hermes-run-id"]
    assert (await http.get(f"/v1/runs/{run_id}/events", headers=auth(KEY_ALICE))).status_code == 200

    erased = await http.delete("/v1/admin/end_users/u3?key=alice", headers=auth(KEY_ADMIN))

    assert erased.status_code == 200, erased.text
    assert erased.json()["deleted"]["runs"] == 1
    for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
        assert (await http.get(path, headers=auth(KEY_ALICE))).status_code == 404, path
