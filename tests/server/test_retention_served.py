"""Retention and erasure against a real ``serve`` process (one, for the module): the sweeper,
run through the admin route, deletes what is past retention — sessions with their transcripts
and workspaces, runs, uploads (rows and bytes), approvals — and nothing else (fresh rows and
files, and another profile's with a longer retention, stay); erasing an end user stops their
run in progress and leaves no row of theirs in any table and no file of theirs on disk, while
another end user's data stays."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert, select, text, update
from sqlmodel import SQLModel

from hermes_core.persistence import FileRecord, Store, sqlite_url
from hermes_core.persistence.files import FILES
from hermes_core.persistence.retention import APPROVALS
from hermes_core.persistence.runs import RUNS
from hermes_core.persistence.sessions import SESSIONS
from hermes_core.persistence.tables import ConversationRow, MemoryRow, UsageDailyRow
from server.files.uploads import FileLimits, FileVault
from server.files.workspaces import conversation_workspace
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.server.served import Served, http_client, serving, simulated_provider, until

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = f"hermes-retention-{uuid.uuid4().hex[:8]}"
KEY_TEAM = f"sk-retention-team-{uuid.uuid4().hex}"
KEY_ADMIN = f"sk-retention-admin-{uuid.uuid4().hex}"
DAY = 86400.0

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {team}, principal: team, trusted_front_end: true}}
    - {{key: {admin}, principal: root, admin: true}}
providers:
{provider}retention:
  sessions_days: 30
  runs_days: 30
  files_days: 30
  approvals_days: 30
profiles:
  - {{id: agent, providers: [sim]}}
  - id: keeper
    providers: [sim]
    retention: {{sessions_days: 365, runs_days: 365, approvals_days: 365}}
"""


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("retention")
    config = CONFIG.format(
        data=data,
        team=KEY_TEAM,
        admin=KEY_ADMIN,
        provider=simulated_provider(_simulator_server, UPSTREAM),
    )
    with serving(data, config) as server:
        yield server


@pytest.fixture
async def store(served: Served) -> AsyncIterator[Store]:
    opened = await Store.open(sqlite_url(served.data_dir / "hermes.db"), migrate=False)
    yield opened
    await opened.close()


def answers(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def said(reply: str, *, repeat: int = 1) -> Step:
    return Step(reply=Reply(text=reply), repeat=repeat)


async def chat(
    served: Served, profile: str, name: str, content: str, *, user: str | None = None
) -> dict[str, Any]:
    headers = {"x-hermes-session-id": name}
    if user is not None:
        headers["x-hermes-memory-scope"] = user
    async with http_client(served.base_url, KEY_TEAM) as http:
        response = await http.post(
            "/v1/chat/completions",
            json={"model": profile, "messages": [{"role": "user", "content": content}]},
            headers=headers,
        )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def raw_chat(served: Served, name: str, content: str, *, user: str) -> httpx.Response:
    headers = {"x-hermes-session-id": name, "x-hermes-memory-scope": user}
    async with http_client(served.base_url, KEY_TEAM) as http:
        return await http.post(
            "/v1/chat/completions",
            json={"model": "agent", "messages": [{"role": "user", "content": content}]},
            headers=headers,
        )


async def upload(served: Served, name: str, *, user: str | None = None) -> str:
    headers = {"x-hermes-memory-scope": user} if user is not None else {}
    async with http_client(served.base_url, KEY_TEAM) as http:
        response = await http.post(
            "/v1/files",
            files={"file": (name, b"contents of " + name.encode())},
            data={"purpose": "user_data"},
            headers=headers,
        )
    assert response.status_code == 200, response.text
    file_id: str = response.json()["id"]
    return file_id


def workspace(served: Served, owner: str, name: str) -> Path:
    """A conversation's workspace with a file in it, as its agent would leave it."""
    root = conversation_workspace(served.data_dir / "workspaces", owner, name)
    (root / "out").mkdir(parents=True, exist_ok=True)
    (root / "out" / "result.csv").write_text("a,b\n1,2\n")
    return root


def upload_path(served: Served, owner: str, file_id: str) -> Path:
    """Where the server keeps an upload's bytes."""
    record = FileRecord(id=file_id, owner=owner, filename="", purpose="", bytes=0, created_at=0)
    limits = FileLimits(max_file_bytes=1, quota_bytes=1, max_files=1)
    return FileVault(served.data_dir / "files", None, limits).path(record)  # type: ignore[arg-type]


async def approval(store: Store, approval_id: str, profile: str, *, at: float, owner: str) -> None:
    async with store.db.engine.begin() as conn:
        await conn.execute(
            insert(APPROVALS).values(
                id=approval_id,
                owner="team",
                conversation_owner=owner,
                conversation="somewhere",
                run_id="run_gone",
                profile=profile,
                call_id="call_1",
                tool="shell",
                arguments={"command": "ls"},
                reason="asks",
                status="denied",
                scope="once",
                created_at=at,
                expires_at=at + 60,
            )
        )


async def sweep(served: Served) -> dict[str, int]:
    async with http_client(served.base_url, KEY_ADMIN) as http:
        response = await http.post("/v1/admin/retention/sweep")
    assert response.status_code == 200, response.text
    deleted: dict[str, int] = response.json()["deleted"]
    return deleted


async def ids(store: Store, column: Any, *where: Any) -> set[str]:
    async with store.db.engine.connect() as conn:
        return set((await conn.execute(select(column).where(*where))).scalars())


async def test_the_sweeper_deletes_what_is_past_retention_and_nothing_else(
    simulator: SimulatorServer, served: Served, store: Store
) -> None:
    answers(simulator, said("Noted.", repeat=3))
    old = await chat(served, "agent", "old-chat", "an old question")
    new = await chat(served, "agent", "new-chat", "a new question")
    kept = await chat(served, "keeper", "keeper-chat", "a question kept a year")
    old_files = workspace(served, "team", "old-chat")
    new_files = workspace(served, "team", "new-chat")
    keeper_files = workspace(served, "team", "keeper-chat")
    old_upload = await upload(served, "old.txt")
    new_upload = await upload(served, "new.txt")
    now = time.time()
    await approval(store, "appr_old", "agent", at=now - 40 * DAY, owner="team")
    await approval(store, "appr_keeper", "keeper", at=now - 40 * DAY, owner="team")
    await approval(store, "appr_new", "agent", at=now, owner="team")
    run_of = {
        name: body["hermes"]["run_id"]
        for name, body in (("old", old), ("new", new), ("keeper", kept))
    }
    # Forty days ago: the old conversation, the keeper's (kept a year), their runs, one upload.
    async with store.db.engine.begin() as conn:
        for name in ("old-chat", "keeper-chat"):
            await conn.execute(
                update(SESSIONS).where(SESSIONS.c.name == name).values(updated_at=now - 40 * DAY)
            )
        for name in ("old", "keeper"):
            await conn.execute(
                update(RUNS).where(RUNS.c.id == run_of[name]).values(ended_at=now - 40 * DAY)
            )
        await conn.execute(
            update(FILES).where(FILES.c.id == old_upload).values(created_at=now - 40 * DAY)
        )
    assert upload_path(served, "team", old_upload).is_file()

    deleted = await sweep(served)

    assert deleted["sessions"] == 1
    assert deleted["messages"] >= 2
    assert deleted["workspaces"] == 1
    assert deleted["runs"] == 1
    assert deleted["files"] == 1
    assert deleted["approvals"] == 1
    names = await ids(store, SESSIONS.c.name, SESSIONS.c.owner == "team")
    assert "old-chat" not in names
    assert {"new-chat", "keeper-chat"} <= names
    runs = await ids(store, RUNS.c.id)
    assert run_of["old"] not in runs
    assert {run_of["new"], run_of["keeper"]} <= runs
    assert await ids(store, FILES.c.id) >= {new_upload}
    assert old_upload not in await ids(store, FILES.c.id)
    assert not upload_path(served, "team", old_upload).exists()
    assert upload_path(served, "team", new_upload).is_file()
    approvals = await ids(store, APPROVALS.c.id)
    assert "appr_old" not in approvals
    assert {"appr_keeper", "appr_new"} <= approvals
    assert not old_files.exists()
    assert (new_files / "out" / "result.csv").is_file()
    assert (keeper_files / "out" / "result.csv").is_file()
    async with http_client(served.base_url, KEY_TEAM) as http:
        assert (await http.get(f"/v1/files/{old_upload}")).status_code == 404
        assert (await http.get(f"/v1/files/{new_upload}")).status_code == 200
    assert "retention sweep: deleted" in served.log.read_text()
    # A second sweep finds nothing more.
    assert not any((await sweep(served)).values())


async def every_row_naming(store: Store, *values: str) -> list[str]:
    """Every row of every table (and SQLite's message index) holding one of ``values``."""
    found = []
    async with store.db.engine.connect() as conn:
        for table in SQLModel.metadata.sorted_tables:
            for row in await conn.execute(select(table)):
                shown = repr(tuple(row))
                if any(value in shown for value in values):
                    found.append(f"{table.name}: {shown[:160]}")
        for value in values:
            hits = await conn.execute(
                text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q"),
                {"q": '"' + value + '"'},
            )
            found.extend(f"messages_fts: {row.rowid}" for row in hits)
    return found


async def end_user_data(
    simulator: SimulatorServer, served: Served, store: Store, user: str
) -> dict[str, Any]:
    """What an end user leaves: conversations with their workspaces, a stored response, an
    upload, memory, a conversation object, ledger rows."""
    answers(simulator, said(f"Hello {user}.", repeat=2))
    await chat(served, "agent", f"{user}-chat", f"I am {user}", user=user)
    async with http_client(served.base_url, KEY_TEAM) as http:
        response = await http.post(
            "/v1/responses",
            json={"model": "agent", "input": f"Remember {user}"},
            headers={"x-hermes-memory-scope": user},
        )
        assert response.status_code == 200, response.text
        conversation = await http.post(
            "/v1/conversations", json={}, headers={"x-hermes-memory-scope": user}
        )
        assert conversation.status_code == 200, conversation.text
    file_id = await upload(served, f"{user}.txt", user=user)
    owner = f"team/{user}"
    now = time.time()
    # Rows no request of these writes yet, and marks the requests' rows may lack today.
    async with store.db.engine.begin() as conn:
        await conn.execute(
            insert(MemoryRow.__table__).values(  # type: ignore[attr-defined]
                scope=owner, target="user", entries=[f"{user} likes tea"], updated_at=now
            )
        )
        await conn.execute(
            insert(UsageDailyRow.__table__).values(  # type: ignore[attr-defined]
                day="2026-01-02",
                owner="team",
                end_user=user,
                profile="agent",
                provider="sim",
                model=f"m-{user}",
                calls=1,
                input_tokens=1,
                cache_read_tokens=0,
                cache_write_tokens=0,
                output_tokens=1,
                reasoning_tokens=0,
                cost_usd=0.0,
            )
        )
        await conn.execute(update(FILES).where(FILES.c.id == file_id).values(end_user=user))
        conversations = ConversationRow.__table__  # type: ignore[attr-defined]
        await conn.execute(
            update(conversations)
            .where(conversations.c.id == conversation.json()["id"])
            .values(end_user=user)
        )
    await approval(store, f"appr_{user}", "agent", at=now, owner=owner)
    return {
        "workspace": workspace(served, owner, f"{user}-chat"),
        "upload": upload_path(served, "team", file_id),
        "file_id": file_id,
    }


async def test_erasing_an_end_user_leaves_no_row_or_file_of_theirs(
    simulator: SimulatorServer, served: Served, store: Store
) -> None:
    ann = f"ann{uuid.uuid4().hex[:8]}"
    ben = f"ben{uuid.uuid4().hex[:8]}"
    theirs = await end_user_data(simulator, served, store, ann)
    kept = await end_user_data(simulator, served, store, ben)
    # A run of Ann's in progress (its model takes its time): the erasure stops it first.
    answers(simulator, Step(reply=Reply(text="slow"), fault=Fault(first_byte_delay=30)))
    running = asyncio.create_task(raw_chat(served, f"{ann}-chat", "still there?", user=ann))

    async def ann_runs() -> bool:
        return bool(await store.erasure.live_runs("team", ann))

    assert await until(ann_runs, server=served)

    async with http_client(served.base_url, KEY_ADMIN) as http:
        erased = await http.delete(f"/v1/admin/end_users/{ann}", params={"key": "team"})

    assert erased.status_code == 200, erased.text
    deleted = erased.json()["deleted"]
    assert deleted["sessions"] >= 2
    assert deleted["workspaces"] == 1
    assert deleted["file_bytes"] == 1
    await asyncio.wait_for(running, 30)  # its client was answered (the run ended)
    assert await every_row_naming(store, ann) == []
    assert not theirs["workspace"].exists()
    assert not theirs["upload"].exists()
    # Ben behind the same key keeps everything.
    assert len(await every_row_naming(store, ben)) >= 8
    assert (kept["workspace"] / "out" / "result.csv").is_file()
    assert kept["upload"].is_file()
    logged = [line for line in served.log.read_text().splitlines() if "end user erased" in line]
    assert len(logged) == 1
    assert "key team" in logged[0]
    assert ann not in logged[0]  # named by a digest only
