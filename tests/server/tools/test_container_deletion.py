"""Deleting a container (a conversation's workspace) while a turn of its conversation runs is
a 409, as deleting the conversation is: the turn's commands would go on in a workspace gone
from under them. Once the turn has ended, the container is deleted."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_output_text import AnnotationContainerFileCitation

from server.simulator import SimulatorServer
from tests.server.tools.conftest import MODEL, UPSTREAM, ToolServer, answer, call, script, until

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

SLOW_WRITE = "sleep 2 && echo late > after.txt"


async def _busy_then_deleted(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    http: httpx.AsyncClient,
    container: str,
    turn: asyncio.Task[httpx.Response],
) -> None:
    """While ``turn`` runs its slow command, deleting ``container`` is a 409 that leaves the
    command's work in place; after, the deletion goes through."""
    assert await until(
        lambda: len(simulator.state.requests(scenario=UPSTREAM)) >= 3, server=tool_server
    )
    refused = await http.delete(f"/v1/containers/{container}")
    done = await turn

    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "container_busy"
    assert done.status_code == 200
    listed = (await http.get(f"/v1/containers/{container}/files")).json()["data"]
    assert "after.txt" in [f["path"] for f in listed]
    deleted = await http.delete(f"/v1/containers/{container}")
    assert deleted.status_code == 200, deleted.text
    assert (await http.get(f"/v1/containers/{container}")).status_code == 404


async def test_a_chat_sessions_container_is_not_deleted_while_its_turn_runs(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    session = {"x-hermes-session-id": "container-in-use"}
    script(simulator, call("write_file", path="a.txt", content="a"), answer("Wrote a.txt."))
    made = await openai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a"}], extra_headers=session
    )
    cited = made.choices[0].message.model_dump()["annotations"][0]["container_file_citation"]
    script(simulator, call("shell", command=SLOW_WRITE), answer("Done."))
    turn = asyncio.create_task(
        http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "b"}]},
            headers=session,
        )
    )

    await _busy_then_deleted(tool_server, simulator, http, cited["container_id"], turn)


async def test_a_responses_chains_container_is_not_deleted_while_its_turn_runs(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    script(simulator, call("write_file", path="a.txt", content="a"), answer("Wrote a.txt."))
    first = await openai.responses.create(model=MODEL, input="a")
    message = first.output[-1]
    assert isinstance(message, ResponseOutputMessage)
    text = message.content[0]
    assert isinstance(text, ResponseOutputText)
    cited = text.annotations[0]
    assert isinstance(cited, AnnotationContainerFileCitation)
    script(simulator, call("shell", command=SLOW_WRITE), answer("Done."))
    turn = asyncio.create_task(
        http.post(
            "/v1/responses",
            json={"model": MODEL, "input": "b", "previous_response_id": first.id},
        )
    )

    await _busy_then_deleted(tool_server, simulator, http, cited.container_id, turn)
