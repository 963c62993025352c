"""Names clients give their files, as the agent's workspace takes them: any name an upload
keeps (255 characters, of any script) is placed, cut short to fit the file system if it must,
and the model is told where."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import MODEL, UPSTREAM, ToolServer, answer, script

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

CSV = b"region,total\nnorth,12\n"


def _user_text_seen(simulator: SimulatorServer) -> str:
    """What the model was shown of the user's last message, in the run's last call."""
    last = simulator.state.requests(scenario=UPSTREAM)[-1].body["messages"]
    content: Any = next(m for m in reversed(last) if m["role"] == "user")["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


async def test_an_upload_whose_name_is_too_long_for_the_disk_is_placed_under_a_shorter_one(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    name = "é" * 200 + ".csv"  # 204 characters, as the upload keeps it; 404 bytes on disk
    uploaded = await openai.files.create(file=(name, CSV), purpose="user_data")
    assert uploaded.filename == name
    script(simulator, answer("Read."), answer("Read again."))

    for turn, conversation in enumerate(["long-name-chat", "long-name-chat"]):
        completion = await openai.chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": f"Turn {turn}."},
                        {"type": "file", "file": {"file_id": uploaded.id}},
                    ],
                }
            ],
            extra_headers={"x-hermes-session-id": conversation},
        )
        assert completion.choices[0].message.content in ("Read.", "Read again.")

    placed = "é" * 125 + ".csv"  # the most whole characters 255 bytes hold, and the suffix
    assert f"it is in your workspace at {placed}." in _user_text_seen(simulator)
    listing = (await http.get("/v1/workspaces/long-name-chat/files")).json()["data"]
    assert [(f["path"], f["bytes"]) for f in listing] == [(placed, len(CSV))]


async def test_two_long_names_cut_to_the_same_name_are_placed_side_by_side(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    first = await openai.files.create(file=("ж" * 130 + "a.csv", b"a\n"), purpose="user_data")
    second = await openai.files.create(file=("ж" * 130 + "b.csv", b"b\n"), purpose="user_data")
    script(simulator, answer("Both."))

    raw = await openai.responses.with_raw_response.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Compare them."},
                    {"type": "input_file", "file_id": first.id},
                    {"type": "input_file", "file_id": second.id},
                ],
            }
        ],
    )

    assert raw.parse().output_text == "Both."
    conversation = raw.headers["x-hermes-session-id"]
    listing = (await http.get(f"/v1/workspaces/{conversation}/files")).json()["data"]
    stem = "ж" * 125  # 250 bytes and '.csv'; ' (2)' takes two characters more off
    assert sorted(f["path"] for f in listing) == sorted([stem + ".csv", stem[:-2] + " (2).csv"])
    for entry in listing:
        assert len(entry["path"].encode()) <= 255
