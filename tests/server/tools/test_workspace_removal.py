"""A workspace removed leaves nothing of itself on disk: deleting its container or its
session, or the end of a run that had no conversation, also removes the record of the uploads
placed in it (their ids and the names the user gave them), which outlived them."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import MODEL, ToolServer, answer, call, script, until

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


def _beside(tool_server: ToolServer, conversation: str) -> list[str]:
    """What is on disk under the workspace's name, itself or beside it."""
    workspace = tool_server.workspace(conversation)
    return sorted(p.name for p in workspace.parent.glob(f"{workspace.name}*"))


async def test_deleting_a_container_leaves_nothing_of_its_uploads_on_disk(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    uploaded = await openai.files.create(file=("patient-x.csv", b"a\n"), purpose="user_data")
    script(simulator, call("write_file", path="out.txt", content="done"), answer("out.txt"))
    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Go."},
                    {"type": "file", "file": {"file_id": uploaded.id}},
                ],
            }
        ],
        extra_headers={"x-hermes-session-id": "container-removed"},
    )
    cited = completion.choices[0].message.model_dump()["annotations"][0]
    assert _beside(tool_server, "container-removed") != []

    await openai.containers.delete(cited["container_file_citation"]["container_id"])

    assert _beside(tool_server, "container-removed") == []


async def test_a_run_without_a_conversation_leaves_nothing_of_its_uploads_on_disk(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    uploaded = await openai.files.create(file=("patient-y.csv", b"a\n"), purpose="user_data")
    owner_dir = tool_server.workspace("any").parent
    before = set(owner_dir.iterdir()) if owner_dir.exists() else set()
    script(simulator, call("read_file", path="patient-y.csv"), answer("Read."))

    response = await openai.responses.create(
        model=MODEL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Read it."},
                    {"type": "input_file", "file_id": uploaded.id},
                ],
            }
        ],
        store=False,
    )

    assert response.output_text == "Read."
    assert await until(lambda: set(owner_dir.iterdir()) == before, server=tool_server)
