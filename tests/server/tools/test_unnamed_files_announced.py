"""A file whose name is not UTF-8 (a command can make one: names are bytes) cannot be named in
an answer: no JSON, link or Markdown carries it. The answers announcing a turn's files leave
it out, and are answered (they were a 500, or a cut stream); the workspace still lists it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_output_text import AnnotationContainerFileCitation

from server.simulator import SimulatorServer
from tests.server.served import sse_data
from tests.server.tools.conftest import MODEL, ToolServer, answer, call, script

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

MAKE_BOTH = "printf x > \"$(printf 'r\\377\\376.png')\" && printf y > fine.txt"
"""A file named with the bytes ``r\\xff\\xfe.png``, and one named in plain text."""


def _asked(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_a_chat_answer_announces_the_files_named_in_text_and_leaves_out_the_rest(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(simulator, call("shell", command=MAKE_BOTH), answer("Made them."))

    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=_asked("Make two files."),
        extra_headers={"x-hermes-session-id": "bytes-named-chat"},
    )

    annotations = completion.choices[0].message.model_dump()["annotations"]
    assert [a["container_file_citation"]["filename"] for a in annotations] == ["fine.txt"]


async def test_open_webui_shows_the_files_named_in_text_and_leaves_out_the_rest(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, call("shell", command=MAKE_BOTH), answer("Made them."))

    streamed = await http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "stream": True, "messages": _asked("Make two files.")},
        headers={"x-openwebui-chat-id": "bytes-named-owui"},
    )

    assert streamed.status_code == 200
    chunks = sse_data(streamed.text)
    text = "".join(
        choice["delta"].get("content") or "" for c in chunks for choice in c.get("choices", [])
    )
    shown = text.partition("Made them.")[2]
    assert "[fine.txt](" in shown
    assert shown.count("](") == 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_a_response_cites_the_files_named_in_text_and_the_workspace_lists_both(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    script(simulator, call("shell", command=MAKE_BOTH), answer("Made them."))

    raw = await openai.responses.with_raw_response.create(model=MODEL, input="Make two files.")

    response = raw.parse()
    assert response.status == "completed"
    message = response.output[-1]
    assert isinstance(message, ResponseOutputMessage)
    text = message.content[0]
    assert isinstance(text, ResponseOutputText)
    cited = [a.filename for a in text.annotations if isinstance(a, AnnotationContainerFileCitation)]
    assert cited == ["fine.txt"]
    conversation = raw.headers["x-hermes-session-id"]
    listed = (await http.get(f"/v1/workspaces/{conversation}/files")).json()["data"]
    assert sorted(f["path"] for f in listed) == ["fine.txt", "r\ufffd\ufffd.png"]
