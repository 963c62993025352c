"""Hostile names on the routes that serve workspace files and skills, against a real ``serve``
process: a file id naming a path that is not UTF-8, a workspace file whose name is not UTF-8
(a command may make one), and a skill whose front matter spells a character no store can
hold. Each is a 4xx in the OpenAI envelope or a listing that still answers; never a 500."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.server.served import (
    Served,
    answer,
    call,
    http_client,
    script,
    serving,
    simulated_provider,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "hostile-files-upstream"
KEY = "sk-hostile-files-0123456789"
MODEL = "hermes-agent"
NOT_UTF8 = b"report \xff.txt"
"""A name a shell command may give a file; no UTF-8 text spells it."""

CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: alice}}]
providers:
{provider}profiles:
  - {{id: {model}, providers: [sim], tools: [files]}}
"""


@dataclass(frozen=True)
class Container:
    id: str
    name: str
    root: Path


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("hostile-files")
    provider = simulated_provider(_simulator_server, UPSTREAM)
    with serving(data, CONFIG.format(data=data, key=KEY, provider=provider, model=MODEL)) as s:
        yield s


@pytest.fixture(scope="module")
def container(_simulator_server: SimulatorServer, served: Served) -> Container:
    """A conversation's workspace (the agent wrote notes.txt in it), holding beside that file
    one whose name is not UTF-8, as a command run there could leave it."""
    script(
        _simulator_server,
        UPSTREAM,
        call("write_file", path="notes.txt", content="hello"),
        answer("done"),
    )
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=served.base_url, headers=auth, timeout=60) as http:
        made = http.post("/v1/responses", json={"model": MODEL, "input": "write"})
        assert made.status_code == 200, made.text
        listed = http.get("/v1/containers").json()["data"]
    [notes] = list((served.data_dir / "workspaces").rglob("notes.txt"))
    (notes.parent / os.fsdecode(NOT_UTF8)).write_text("odd")
    [only] = listed
    return Container(only["id"], only["name"], notes.parent)


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, KEY) as client:
        yield client


def cfile(path: bytes) -> str:
    """The container file id of ``path`` (server/files/links.py: its bytes, base64url)."""
    return "cfile_" + base64.urlsafe_b64encode(path).rstrip(b"=").decode()


def is_envelope(response: httpx.Response) -> bool:
    body = response.json()
    return set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])


@pytest.mark.parametrize("missing", [b"gone \xff.txt", b"\xed\xa0\x80"])
@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("GET", "/content"), ("DELETE", "")])
async def test_a_container_file_id_naming_a_path_that_is_not_utf8_is_a_404(
    http: httpx.AsyncClient, container: Container, missing: bytes, method: str, suffix: str
) -> None:
    answer = await http.request(
        method, f"/v1/containers/{container.id}/files/{cfile(missing)}{suffix}"
    )
    assert answer.status_code == 404, answer.text
    assert is_envelope(answer)


async def test_a_workspace_file_whose_name_is_not_utf8_is_listed_read_and_downloaded(
    http: httpx.AsyncClient, container: Container
) -> None:
    shown = NOT_UTF8.decode("utf-8", "replace")

    listed = await http.get(f"/v1/containers/{container.id}/files")
    assert listed.status_code == 200, listed.text
    assert {f["path"] for f in listed.json()["data"]} == {"notes.txt", shown}
    one = await http.get(f"/v1/containers/{container.id}/files/{cfile(NOT_UTF8)}")
    assert one.status_code == 200, one.text
    assert one.json()["path"] == shown
    content = await http.get(f"/v1/containers/{container.id}/files/{cfile(NOT_UTF8)}/content")
    assert (content.status_code, content.content) == (200, b"odd")
    workspace = await http.get(f"/v1/workspaces/{container.name}/files")
    assert workspace.status_code == 200, workspace.text
    assert shown in {f["path"] for f in workspace.json()["data"]}


def skill_md(description: str) -> bytes:
    return f"---\nname: odd-skill\ndescription: {description}\n---\nDo it.\n".encode()


@pytest.mark.parametrize(
    "description",
    ['"a lone surrogate \\ud800"', '"a NUL \\0 character"'],
    ids=["lone-surrogate", "nul"],
)
async def test_a_skill_whose_front_matter_spells_unstorable_text_is_a_400_and_not_kept(
    http: httpx.AsyncClient, description: str
) -> None:
    upload = [("files[]", ("odd-skill/SKILL.md", skill_md(description)))]

    answer = await http.post("/v1/skills", files=upload)

    assert answer.status_code == 400, answer.text
    assert is_envelope(answer)
    assert answer.json()["error"]["param"] == "files"
    names = {s["name"] for s in (await http.get("/v1/skills")).json()["data"]}
    assert "odd-skill" not in names
