"""Files in and out of a conversation, against a real server process: an uploaded CSV that a
message refers to is in the agent's workspace for its tools, and what the agent wrote there is
listed and downloaded through ``/v1/workspaces``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import (
    KEY_BOB,
    MODEL,
    UPSTREAM,
    ToolServer,
    answer,
    call,
    script,
    tool_results,
)

CSV = b"region,total\nnorth,12\nsouth,30\n"
SUM_TO_FILE = (
    "import csv\n"
    "total = sum(int(row['total']) for row in csv.DictReader(open('sales.csv')))\n"
    "open('totals.txt', 'w').write(f'total={total}\\n')\n"
    "print('total', total)\n"
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


def _user_text_seen(simulator: SimulatorServer) -> str:
    """What the model was shown of the user's last message, in its first call of the run."""
    first = simulator.state.requests(scenario=UPSTREAM)[0].body["messages"]
    content: Any = next(m for m in reversed(first) if m["role"] == "user")["content"]
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content)


async def test_a_chat_user_uploads_a_csv_the_agent_reads_and_downloads_what_it_wrote(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    uploaded = await openai.files.create(file=("sales.csv", CSV), purpose="user_data")
    script(simulator, call("code", code=SUM_TO_FILE), answer("The total is 42."))

    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Add up the totals."},
                    {"type": "file", "file": {"file_id": uploaded.id}},
                ],
            }
        ],
        extra_headers={"x-hermes-session-id": "csv-chat"},
    )

    assert completion.choices[0].message.content == "The total is 42."
    assert "sales.csv (31 bytes): it is in your workspace at sales.csv" in _user_text_seen(
        simulator
    )
    assert "total 42" in tool_results(simulator)[0]
    listing = (await http.get("/v1/workspaces/csv-chat/files")).json()
    assert {f["path"]: f["bytes"] for f in listing["data"]} == {
        "sales.csv": 31,
        "totals.txt": 9,
    }
    produced = await http.get("/v1/workspaces/csv-chat/files/totals.txt")
    assert produced.status_code == 200
    assert produced.content == b"total=42\n"
    assert "totals.txt" in produced.headers["content-disposition"]


async def test_a_responses_input_file_is_read_by_the_agent_and_its_output_downloaded(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    uploaded = await openai.files.create(file=("sales.csv", CSV), purpose="user_data")
    script(simulator, call("code", code=SUM_TO_FILE), answer("42."))

    raw = await openai.responses.with_raw_response.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Add up the totals."},
                    {"type": "input_file", "file_id": uploaded.id},
                ],
            }
        ],
    )

    assert raw.parse().output_text == "42."
    conversation = raw.headers["x-hermes-session-id"]
    produced = await http.get(f"/v1/workspaces/{conversation}/files/totals.txt")
    assert produced.content == b"total=42\n"


async def test_a_file_resent_with_the_history_does_not_overwrite_the_agents_edits(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    uploaded = await openai.files.create(file=("sales.csv", CSV), purpose="user_data")
    asked: Any = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Fix the north row."},
            {"type": "file", "file": {"file_id": uploaded.id}},
        ],
    }
    session = {"x-hermes-session-id": "csv-resent"}
    script(
        simulator,
        call("edit_file", path="sales.csv", old_text="north,12", new_text="north,13"),
        answer("Fixed."),
    )
    await openai.chat.completions.create(model=MODEL, messages=[asked], extra_headers=session)
    script(simulator, call("read_file", path="sales.csv"), answer("Still fixed."))

    await openai.chat.completions.create(
        model=MODEL,
        messages=[
            asked,
            {"role": "assistant", "content": "Fixed."},
            {"role": "user", "content": "Check."},
        ],
        extra_headers=session,
    )

    assert "north,13" in tool_results(simulator)[-1]
    workspace = tool_server.workspace("csv-resent")
    assert (workspace / "sales.csv").read_bytes() == CSV.replace(b"north,12", b"north,13")
    assert sorted(p.name for p in workspace.iterdir()) == ["sales.csv"]


async def test_a_workspace_is_its_owners_and_its_files_cannot_be_left_through_a_link(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    script(simulator, call("write_file", path="mine.txt", content="mine"), answer("ok"))
    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "write"}],
        extra_headers={"x-hermes-session-id": "owned"},
    )
    workspace = tool_server.workspace("owned")
    (workspace / "config-link").symlink_to(tool_server.data_dir / "hermes.yaml")

    as_bob = {"authorization": f"Bearer {KEY_BOB}"}
    assert (await http.get("/v1/workspaces/owned/files", headers=as_bob)).status_code == 404
    stolen = await http.get("/v1/workspaces/owned/files/mine.txt", headers=as_bob)
    assert stolen.status_code == 404
    assert (await http.get("/v1/workspaces/owned/files/config-link")).status_code == 404
    assert (await http.get("/v1/workspaces/owned/files/%2e%2e/x")).status_code == 404
    listed = (await http.get("/v1/workspaces/owned/files")).json()["data"]
    assert [f["path"] for f in listed] == ["mine.txt"]


async def test_a_message_naming_another_keys_file_is_refused_and_places_nothing(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    async with AsyncOpenAI(
        base_url=f"{tool_server.base_url}/v1", api_key=KEY_BOB, max_retries=0
    ) as bob:
        theirs = await bob.files.create(file=("bob.csv", CSV), purpose="user_data")
    script(simulator, answer("unreached"))

    response = await http.post(
        "/v1/chat/completions",
        json={
            "model": MODEL,
            "messages": [
                {"role": "user", "content": [{"type": "file", "file": {"file_id": theirs.id}}]}
            ],
        },
        headers={"x-hermes-session-id": "not-theirs"},
    )

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "file_not_found"
    assert not (tool_server.workspace("not-theirs") / "bob.csv").exists()
    assert simulator.state.requests(scenario=UPSTREAM) == []
