"""Files a turn makes reach the user in each client's terms, against a real server process:
Responses cite them (``container_file_citation``) and the official SDK downloads them through
``client.containers``; chat's message carries the same facts; Open WebUI's answer shows them
through signed links a browser opens without the API key."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from openai import AsyncOpenAI, NotFoundError
from openai.types.responses import Response, ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_output_text import AnnotationContainerFileCitation

from server.files.links import (
    LinkSigner,
    LinkTarget,
    container_id,
    file_id,
    secret_path,
    signed_url,
)
from server.simulator import SimulatorServer
from tests.server.served import sdk_client
from tests.server.tools.conftest import (
    KEY,
    KEY_BOB,
    MODEL,
    ToolServer,
    answer,
    call,
    script,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

PNG = b"\x89PNG\r\n\x1a\n"
WRITE_CHART = (
    "import struct, zlib\n"
    "def chunk(kind, data):\n"
    "    body = kind + data\n"
    "    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))\n"
    "header = struct.pack('>IIBBBBB', 1, 1, 8, 2, 0, 0, 0)\n"
    "pixels = zlib.compress(b'\\x00\\xff\\x00\\x00')\n"
    "png = b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', header) + chunk(b'IDAT', pixels)"
    " + chunk(b'IEND', b'')\n"
    "open('chart.png', 'wb').write(png)\n"
    "open('data.csv', 'w').write('x,y\\n1,2\\n')\n"
)
MARKDOWN_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)]+)\)")


def _answer_text(response: Response) -> ResponseOutputText:
    message = response.output[-1]
    assert isinstance(message, ResponseOutputMessage)
    part = message.content[0]
    assert isinstance(part, ResponseOutputText)
    return part


def _files_cited(text: ResponseOutputText) -> dict[str, AnnotationContainerFileCitation]:
    return {
        a.filename: a for a in text.annotations if isinstance(a, AnnotationContainerFileCitation)
    }


def _script_chart(simulator: SimulatorServer) -> None:
    script(
        simulator,
        call("code", code=WRITE_CHART),
        answer("Here is chart.png with the data."),
    )


async def test_a_responses_answer_cites_the_chart_and_the_sdk_downloads_it(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    _script_chart(simulator)

    response = await openai.responses.create(model=MODEL, input="Plot it.")

    assert response.status == "completed"
    text = _answer_text(response)
    cited = _files_cited(text)
    assert set(cited) == {"chart.png", "data.csv"}
    chart = cited["chart.png"]
    assert text.text[chart.start_index : chart.end_index] == "chart.png"
    # A file the answer does not name is announced all the same, at the end of the text.
    assert (cited["data.csv"].start_index, cited["data.csv"].end_index) == (len(text.text),) * 2
    assert chart.container_id.startswith("cntr_")

    content = await openai.containers.files.content.retrieve(
        chart.file_id, container_id=chart.container_id
    )
    assert content.content.startswith(PNG)
    container = await openai.containers.retrieve(chart.container_id)
    assert container.id == chart.container_id
    listed = [f async for f in openai.containers.files.list(chart.container_id)]
    assert {f.path for f in listed} >= {"chart.png", "data.csv"}
    one = await openai.containers.files.retrieve(chart.file_id, container_id=chart.container_id)
    assert one.bytes == len(content.content)
    assert chart.container_id in [c.id async for c in openai.containers.list()]


async def test_a_responses_stream_replayed_from_the_store_cites_the_same_files(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    _script_chart(simulator)
    response = await openai.responses.create(model=MODEL, input="Plot it.")
    cited = _files_cited(_answer_text(response))

    replayed = await openai.responses.retrieve(response.id, stream=True)
    annotations = [
        event.annotation
        async for event in replayed
        if event.type == "response.output_text.annotation.added"
    ]

    # The stream's annotation is the SDK's loosely typed object: read it by name.
    assert [getattr(a, "file_id", None) for a in annotations] == [c.file_id for c in cited.values()]


async def test_another_keys_container_id_is_not_found(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    _script_chart(simulator)
    response = await openai.responses.create(model=MODEL, input="Plot it again.")
    chart = _files_cited(_answer_text(response))["chart.png"]

    async with sdk_client(tool_server.base_url, KEY_BOB) as bob:
        with pytest.raises(NotFoundError):
            await bob.containers.retrieve(chart.container_id)
        with pytest.raises(NotFoundError):
            await bob.containers.files.content.retrieve(
                chart.file_id, container_id=chart.container_id
            )
        assert chart.container_id not in [c.id async for c in bob.containers.list()]


async def test_a_chat_message_carries_the_files_as_annotations(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    _script_chart(simulator)

    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Plot it."}],
        extra_headers={"x-hermes-session-id": "chart-chat"},
    )

    message = completion.choices[0].message
    assert message.content == "Here is chart.png with the data."
    annotations = message.annotations or []
    by_name = {a.url_citation.title: a for a in annotations}
    assert set(by_name) == {"chart.png", "data.csv"}
    chart = by_name["chart.png"]
    facts = chart.model_extra["container_file_citation"]  # type: ignore[index]
    assert facts["filename"] == "chart.png"
    downloaded = await openai.containers.files.content.retrieve(
        facts["file_id"], container_id=facts["container_id"]
    )
    assert downloaded.content.startswith(PNG)
    async with httpx.AsyncClient() as browser:  # the signed link needs no key
        fetched = await browser.get(chart.url_citation.url)
    assert fetched.status_code == 200
    assert fetched.content.startswith(PNG)


async def _openwebui_links(tool_server: ToolServer, simulator: SimulatorServer) -> list[str]:
    """The Markdown links of an Open WebUI answer (streamed), image first."""
    _script_chart(simulator)
    body = {
        "model": MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": "Plot it."}],
    }
    headers = {
        "authorization": f"Bearer {KEY}",
        "x-openwebui-chat-id": f"owui-{time.monotonic_ns()}",
    }
    async with httpx.AsyncClient(base_url=tool_server.base_url, timeout=60) as client:
        response = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200
    text = ""
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            frame = json.loads(line[6:])
            for choice in frame.get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    assert text.startswith("Here is chart.png with the data.")
    links = MARKDOWN_LINK.findall(text)
    assert ("!", "chart.png") in [(bang, name) for bang, name, _ in links]
    assert ("", "data.csv") in [(bang, name) for bang, name, _ in links]
    return [url for _, name, url in sorted(links, key=lambda link: link[1])]


async def test_open_webui_shows_the_chart_through_a_signed_link_without_the_key(
    tool_server: ToolServer, simulator: SimulatorServer
) -> None:
    chart, data = await _openwebui_links(tool_server, simulator)

    async with httpx.AsyncClient() as browser:
        image = await browser.get(chart)
        table = await browser.get(data)
    assert image.status_code == 200
    assert image.headers["content-type"] == "image/png"
    assert image.content.startswith(PNG)
    assert table.status_code == 200
    assert table.content == b"x,y\n1,2\n"


async def test_a_signed_link_with_a_changed_character_is_refused(
    tool_server: ToolServer, simulator: SimulatorServer
) -> None:
    chart, _ = await _openwebui_links(tool_server, simulator)
    parts = urlsplit(chart)
    token = parts.path.split("/")[-2]

    async with httpx.AsyncClient() as browser:
        for position in (0, len(token) // 2, len(token) - 1):
            changed = token[:position] + ("A" if token[position] != "A" else "B")
            changed += token[position + 1 :]
            url = chart.replace(f"/{token}/", f"/{changed}/")
            refused = await browser.get(url)
            assert refused.status_code == 403, position
            assert refused.json()["error"]["code"] == "invalid_link"


async def test_an_expired_signed_link_is_refused(
    tool_server: ToolServer, simulator: SimulatorServer
) -> None:
    chart, _ = await _openwebui_links(tool_server, simulator)
    good = LinkSigner.from_file(secret_path(tool_server.data_dir))
    target = good.check(urlsplit(chart).path.split("/")[-2])
    base = f"{urlsplit(chart).scheme}://{urlsplit(chart).netloc}"
    expired = signed_url(base, good.sign(LinkTarget(target.workspace, target.path), 1), "chart.png")

    async with httpx.AsyncClient() as browser:
        refused = await browser.get(expired)
        still = await browser.get(chart)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "link_expired"
    assert still.status_code == 200
    assert unquote(urlsplit(chart).path).endswith("/chart.png")


async def test_a_deleted_container_file_is_gone_and_a_link_out_is_never_served(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    _script_chart(simulator)
    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Plot it."}],
        extra_headers={"x-hermes-session-id": "chart-delete"},
    )
    workspace = tool_server.workspace("chart-delete")
    (workspace / "secrets").symlink_to("/etc/passwd")
    container = container_id("alice", workspace)

    await openai.containers.files.delete(file_id("data.csv"), container_id=container)

    assert not (workspace / "data.csv").exists()
    for gone in ("data.csv", "secrets", "../../../../etc/passwd"):
        with pytest.raises(NotFoundError):
            await openai.containers.files.content.retrieve(file_id(gone), container_id=container)
    listed = {f.path async for f in openai.containers.files.list(container)}
    assert listed == {"chart.png"}
