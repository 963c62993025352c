"""``/v1/workspaces/{conversation}/files[/{path}]`` for any session name a client may give:
one holding slashes (``team/alpha``, as ``DELETE /v1/sessions/{name}`` takes it too) reaches
its workspace, and a path holding a ``files`` folder still reaches its file."""

from __future__ import annotations

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import KEY_BOB, MODEL, ToolServer, answer, call, script

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


async def _write(openai: AsyncOpenAI, simulator: SimulatorServer, session: str, path: str) -> None:
    script(simulator, call("write_file", path=path, content=f"in {path}"), answer("Written."))
    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Write it."}],
        extra_headers={"x-hermes-session-id": session},
    )


async def test_a_session_whose_name_holds_slashes_has_its_workspace_listed_and_downloaded(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    await _write(openai, simulator, "team/alpha", "notes.txt")

    for spelled in ("team%2Falpha", "team/alpha"):
        listed = await http.get(f"/v1/workspaces/{spelled}/files")
        assert listed.status_code == 200, listed.text
        assert [f["path"] for f in listed.json()["data"]] == ["notes.txt"]
        downloaded = await http.get(f"/v1/workspaces/{spelled}/files/notes.txt")
        assert downloaded.content == b"in notes.txt"
    as_bob = {"authorization": f"Bearer {KEY_BOB}"}
    assert (await http.get("/v1/workspaces/team/alpha/files", headers=as_bob)).status_code == 404
    missing = await http.get("/v1/workspaces/team/alpha/files/other.txt")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "file_not_found"


async def test_a_file_under_a_folder_named_files_is_downloaded(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    await _write(openai, simulator, "nested-files", "out/files/report.txt")
    await _write(openai, simulator, "nested-files", "out/files/files")

    report = await http.get("/v1/workspaces/nested-files/files/out/files/report.txt")
    named_files = await http.get("/v1/workspaces/nested-files/files/out/files/files")

    assert report.content == b"in out/files/report.txt"
    assert named_files.content == b"in out/files/files"
    listed = (await http.get("/v1/workspaces/nested-files/files")).json()["data"]
    assert sorted(f["path"] for f in listed) == ["out/files/files", "out/files/report.txt"]
