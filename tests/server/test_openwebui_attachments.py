"""Files from Open WebUI, over real HTTP: what the attachments filter
(``deploy/openwebui/hermes_attachments.py``) sends — an upload, then a ``file`` part naming it
(chat), or the ``input_file`` Open WebUI makes of that part on a Responses connection — lands
in the chat's workspace under its name, once; another key's file is refused; a file the
workspace has no room for is a clear 413. Without the filter, Open WebUI sends only the text it
extracted from a file, and the model is told the file is not in its workspace."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.persistence import sqlite_url
from hermes_core.tools.agent_tools import ALWAYS_ON_TOOLS
from hermes_core.tools.quota import WorkspaceQuota
from server.app import create_app
from server.files.workspaces import conversation_workspace
from server.http.threaded import ThreadedServer
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

CSV = b"region,total\nnorth,12\nsouth,30\n"
WORKSPACE_BYTES = 64 * 1024
RAG_TURN = (
    "### Task:\nRespond to the user query using the provided context.\n\n<context>\n"
    '<source id="1" name="sales.csv" resource-type="file">region: north\ntotal: 12</source>\n'
    '<source id="2" name="https://example.com/page">a web page</source>\n'
    "</context>\n\nAdd up the totals."
)


@dataclasses.dataclass(frozen=True)
class Served:
    base_url: str
    workspaces: Path

    def workspace(self, chat: str, owner: str = "alice/u-1") -> Path:
        return conversation_workspace(self.workspaces, owner, chat)


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A server whose profile has a workspace (the ``files`` toolset) of 64 KiB."""
    data = tmp_path_factory.mktemp("openwebui-files")
    services = make_services(
        _simulator_server,
        database_url=sqlite_url(data / "hermes.db"),
        files_dir=data / "files",
        workspaces_dir=data / "workspaces",
    )
    services.profiles = [
        dataclasses.replace(
            profile,
            toolsets=[*ALWAYS_ON_TOOLS, "files"],
            workspace_quota=WorkspaceQuota(workspace_bytes=WORKSPACE_BYTES),
        )
        for profile in services.profiles
    ]
    with ThreadedServer(create_app(services)) as server:
        yield Served(server.base_url, data / "workspaces")


async def _client(served: Served, key: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=served.base_url, headers=headers, timeout=60
    ) as c:
        yield c


@pytest.fixture
async def alice(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(served, KEY_ALICE):
        yield client


@pytest.fixture
async def bob(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(served, KEY_BOB):
        yield client


async def upload(client: httpx.AsyncClient, name: str, data: bytes = CSV) -> str:
    """An upload as the filter makes it; the new file's id."""
    answer = await client.post(
        "/v1/files", files={"file": (name, data)}, data={"purpose": "user_data"}
    )
    assert answer.status_code == 200, answer.text
    file_id: str = answer.json()["id"]
    return file_id


def chat_body(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "hermes-agent", "messages": list(messages)}


def with_file(text: str, file_id: str, name: str) -> dict[str, Any]:
    """A user message as the filter leaves it: the text, then a part per attached file."""
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "file", "file": {"file_id": file_id, "filename": name}},
        ],
    }


def from_openwebui(chat: str) -> dict[str, str]:
    return {"x-openwebui-chat-id": chat, "x-openwebui-user-id": "u-1"}


def model_saw(simulator: SimulatorServer) -> str:
    """The text of the user's last message in the model's last request."""
    calls = [r for r in simulator.state.requests() if r.model == UPSTREAM_MODEL]
    messages = calls[-1].body["messages"]
    content: Any = next(m for m in reversed(messages) if m["role"] == "user")["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


async def test_a_file_part_from_the_filter_is_placed_under_its_name_in_the_chats_workspace(
    alice: httpx.AsyncClient, served: Served, simulator: SimulatorServer
) -> None:
    file_id = await upload(alice, "sales.csv")

    answer = await alice.post(
        "/v1/chat/completions",
        json=chat_body(with_file("Add up the totals.", file_id, "sales.csv")),
        headers=from_openwebui("chat-placed"),
    )

    assert answer.status_code == 200, answer.text
    assert (served.workspace("chat-placed") / "sales.csv").read_bytes() == CSV
    assert "it is in your workspace at sales.csv" in model_saw(simulator)


async def test_an_input_file_as_open_webui_converts_the_part_for_responses_is_placed(
    alice: httpx.AsyncClient, served: Served
) -> None:
    file_id = await upload(alice, "sales.csv")
    converted = {"type": "input_file", "file_id": file_id, "filename": "sales.csv"}

    answer = await alice.post(
        "/v1/responses",
        json={
            "model": "hermes-agent",
            "input": [
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Add up."}, converted],
                }
            ],
        },
        headers=from_openwebui("chat-responses"),
    )

    assert answer.status_code == 200, answer.text
    assert (served.workspace("chat-responses") / "sales.csv").read_bytes() == CSV


async def test_the_same_file_uploaded_again_for_a_later_turn_is_not_copied_twice(
    alice: httpx.AsyncClient, served: Served, simulator: SimulatorServer
) -> None:
    first, again = await upload(alice, "sales.csv"), await upload(alice, "sales.csv")
    chat = from_openwebui("chat-again")
    await alice.post(
        "/v1/chat/completions",
        json=chat_body(with_file("Keep it.", first, "sales.csv")),
        headers=chat,
    )

    answer = await alice.post(
        "/v1/chat/completions",
        json=chat_body(
            {"role": "user", "content": "Keep it."},
            {"role": "assistant", "content": "Kept."},
            with_file("Again.", again, "sales.csv"),
        ),
        headers=chat,
    )

    assert answer.status_code == 200, answer.text
    assert sorted(p.name for p in served.workspace("chat-again").iterdir()) == ["sales.csv"]
    assert "it is in your workspace at sales.csv" in model_saw(simulator)


async def test_a_file_uploaded_again_after_the_agent_changed_it_is_placed_beside_it(
    alice: httpx.AsyncClient, served: Served
) -> None:
    first, again = await upload(alice, "sales.csv"), await upload(alice, "sales.csv")
    chat = from_openwebui("chat-changed")
    await alice.post(
        "/v1/chat/completions", json=chat_body(with_file("Edit.", first, "sales.csv")), headers=chat
    )
    (served.workspace("chat-changed") / "sales.csv").write_bytes(b"region,total\n")

    await alice.post(
        "/v1/chat/completions",
        json=chat_body(with_file("Again.", again, "sales.csv")),
        headers=chat,
    )

    workspace = served.workspace("chat-changed")
    assert (workspace / "sales.csv").read_bytes() == b"region,total\n"
    assert (workspace / "sales (2).csv").read_bytes() == CSV


async def test_a_file_another_key_uploaded_is_a_404_and_nothing_is_placed(
    alice: httpx.AsyncClient, bob: httpx.AsyncClient, served: Served
) -> None:
    alices = await upload(alice, "secret.csv")

    answer = await bob.post(
        "/v1/chat/completions",
        json={**chat_body(with_file("Read it.", alices, "secret.csv")), "stream": True},
        headers=from_openwebui("chat-bob"),
    )

    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "file_not_found"
    assert not (served.workspace("chat-bob", owner="bob") / "secret.csv").exists()


async def test_a_file_the_workspace_has_no_room_for_is_a_413_naming_it(
    alice: httpx.AsyncClient, served: Served
) -> None:
    big = await upload(alice, "big.csv", b"x" * (WORKSPACE_BYTES + 1))

    answer = await alice.post(
        "/v1/chat/completions",
        json={**chat_body(with_file("Analyse.", big, "big.csv")), "stream": True},
        headers=from_openwebui("chat-full"),
    )

    assert answer.status_code == 413
    error = answer.json()["error"]
    assert error["code"] == "workspace_quota_exceeded"
    assert error["message"].startswith("big.csv cannot be placed in the conversation's workspace")


async def test_open_webuis_extract_of_a_file_not_in_the_workspace_comes_with_a_note(
    alice: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    answer = await alice.post(
        "/v1/chat/completions",
        json=chat_body({"role": "user", "content": RAG_TURN}),
        headers=from_openwebui("chat-rag"),
    )

    assert answer.status_code == 200, answer.text
    seen = model_saw(simulator)
    assert seen.startswith(RAG_TURN)
    assert "Open WebUI gave the text it extracted from sales.csv" in seen
    assert "not in your workspace" in seen
    assert "example.com" not in seen[len(RAG_TURN) :]  # a web page is no file


async def test_no_note_when_the_extracted_file_is_already_in_the_workspace(
    alice: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    file_id = await upload(alice, "sales.csv")
    chat = from_openwebui("chat-rag-placed")
    await alice.post(
        "/v1/chat/completions",
        json=chat_body(with_file("Keep.", file_id, "sales.csv")),
        headers=chat,
    )

    await alice.post(
        "/v1/chat/completions", json=chat_body({"role": "user", "content": RAG_TURN}), headers=chat
    )

    assert model_saw(simulator) == RAG_TURN


def first_user_text(simulator: SimulatorServer) -> str:
    """The text of the first user message in the model's last request."""
    calls = [r for r in simulator.state.requests() if r.model == UPSTREAM_MODEL]
    content: Any = next(m for m in calls[-1].body["messages"] if m["role"] == "user")["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


async def test_an_upload_deleted_after_its_turn_leaves_the_chat_with_the_placed_copy(
    alice: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    file_id = await upload(alice, "sales.csv")
    chat = from_openwebui("chat-deleted-upload")
    await alice.post(
        "/v1/chat/completions",
        json=chat_body(with_file("Keep.", file_id, "sales.csv")),
        headers=chat,
    )
    assert (await alice.delete(f"/v1/files/{file_id}")).status_code == 200

    answer = await alice.post(
        "/v1/chat/completions",
        json=chat_body(
            {"role": "user", "content": "Keep."},
            {"role": "assistant", "content": "Kept."},
            {"role": "user", "content": "Still there?"},
        ),
        headers=chat,
    )

    assert answer.status_code == 200, answer.text
    assert "it is in your workspace at sales.csv" in first_user_text(simulator)


async def test_an_upload_deleted_with_its_copy_gone_too_is_said_to_be_deleted(
    alice: httpx.AsyncClient, served: Served, simulator: SimulatorServer
) -> None:
    file_id = await upload(alice, "sales.csv")
    chat = from_openwebui("chat-deleted-both")
    await alice.post(
        "/v1/chat/completions",
        json=chat_body(with_file("Keep.", file_id, "sales.csv")),
        headers=chat,
    )
    await alice.delete(f"/v1/files/{file_id}")
    (served.workspace("chat-deleted-both") / "sales.csv").unlink()

    answer = await alice.post(
        "/v1/chat/completions",
        json=chat_body(
            {"role": "user", "content": "Keep."},
            {"role": "assistant", "content": "Kept."},
            {"role": "user", "content": "Still there?"},
        ),
        headers=chat,
    )

    assert answer.status_code == 200, answer.text
    assert "sales.csv" in first_user_text(simulator)
    assert "it has been deleted since" in first_user_text(simulator)


async def test_a_regenerated_turn_naming_an_upload_deleted_since_uses_the_placed_copy(
    alice: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    file_id = await upload(alice, "sales.csv")
    chat, asked = from_openwebui("chat-regenerated"), with_file("Keep.", file_id, "sales.csv")
    await alice.post("/v1/chat/completions", json=chat_body(asked), headers=chat)
    await alice.delete(f"/v1/files/{file_id}")  # the filter deletes it after the answer

    answer = await alice.post("/v1/chat/completions", json=chat_body(asked), headers=chat)

    assert answer.status_code == 200, answer.text
    assert "it is in your workspace at sales.csv" in model_saw(simulator)
