"""A run that searches, reads a page and answers citing it: the citation reaches chat
clients as ``url_citation`` annotations, Responses clients as ``output_text`` annotations
(with their stream event), and Open WebUI as source chips. Internal addresses stay out of
reach in a real run too."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.responses import ResponseOutputText

from server.simulator import SimulatorServer
from tests.server.served import answer, call, sse_data, tool_results_of, until
from tests.server.web.conftest import MODEL, OPENWEBUI_MODEL, UPSTREAM, WebServer, script

pytestmark = pytest.mark.slow

QUESTION = "How long did the Marsh family keep the Brightwater light?"


def research(simulator: SimulatorServer, web_server: WebServer) -> str:
    """Script search → fetch → an answer linking the page; returns the cited link."""
    article = web_server.site.url("/article")
    link = f"[The Lighthouse Keepers of Brightwater]({article})"
    script(
        simulator,
        call("web_search", query="Brightwater lighthouse keepers"),
        call("web_fetch", url=article),
        answer(f"The Marsh family kept it for 112 years, from 1851 to 1963 ({link})."),
    )
    return link


def tool_results(simulator: SimulatorServer) -> list[str]:
    return tool_results_of(simulator, UPSTREAM)


async def test_a_chat_answer_cites_the_page_it_read(
    openai: AsyncOpenAI, simulator: SimulatorServer, web_server: WebServer
) -> None:
    link = research(simulator, web_server)
    completion = await openai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": QUESTION}]
    )
    message = completion.choices[0].message
    results = tool_results(simulator)
    assert "The Lighthouse Keepers of Brightwater" in results[0]  # the search hit
    assert "Elsa Marsh" in results[1]  # the page, as Markdown
    assert message.annotations is not None
    [citation] = message.annotations
    assert citation.type == "url_citation"
    cited = citation.url_citation
    assert cited.url == web_server.site.url("/article")
    assert cited.title == "The Lighthouse Keepers of Brightwater"
    assert message.content is not None
    assert message.content[cited.start_index : cited.end_index] == link


async def test_a_streamed_chat_answer_sends_its_citations_after_the_text(
    http: httpx.AsyncClient, simulator: SimulatorServer, web_server: WebServer
) -> None:
    link = research(simulator, web_server)
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    response = await http.post("/v1/chat/completions", json=body)
    chunks = [c for c in sse_data(response.text) if c.get("choices")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    with_annotations = [c for c in chunks if "annotations" in c["choices"][0]["delta"]]
    [chunk] = with_annotations
    [annotation] = chunk["choices"][0]["delta"]["annotations"]
    cited = annotation["url_citation"]
    assert text[cited["start_index"] : cited["end_index"]] == link
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert chunks.index(chunk) < len(chunks) - 1


async def test_a_response_annotates_its_output_text_and_streams_the_annotation(
    openai: AsyncOpenAI, simulator: SimulatorServer, web_server: WebServer
) -> None:
    link = research(simulator, web_server)
    added: list[Any] = []
    async with openai.responses.stream(model=MODEL, input=QUESTION) as stream:
        async for event in stream:
            if event.type == "response.output_text.annotation.added":
                added.append(event)
        response = await stream.get_final_response()
    texts = [
        part
        for item in response.output
        if item.type == "message"
        for part in item.content
        if isinstance(part, ResponseOutputText)
    ]
    [part] = [p for p in texts if p.annotations]
    [annotation] = part.annotations
    assert annotation.type == "url_citation"
    assert annotation.url == web_server.site.url("/article")
    assert part.text[annotation.start_index : annotation.end_index] == link
    assert [getattr(e.annotation, "url", None) for e in added] == [annotation.url]

    script(simulator, call("web_fetch", url=web_server.site.url("/article")), answer(link))
    stored = await openai.responses.create(model=MODEL, input=QUESTION)
    parts = [p for i in stored.output if i.type == "message" for p in i.content]
    assert any(getattr(p, "annotations", None) for p in parts)


async def test_open_webui_shows_the_pages_read_as_source_chips(
    http: httpx.AsyncClient, simulator: SimulatorServer, web_server: WebServer
) -> None:
    research(simulator, web_server)
    body = {
        "model": OPENWEBUI_MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    response = await http.post("/v1/chat/completions", json=body)
    frames = sse_data(response.text)
    sources = [f["event"]["data"] for f in frames if f.get("event", {}).get("type") == "source"]
    assert [s["source"]["url"] for s in sources] == [web_server.site.url("/article")]
    assert sources[0]["source"]["name"] == "The Lighthouse Keepers of Brightwater"
    assert sources[0]["metadata"][0]["source"] == web_server.site.url("/article")
    # A search hit the answer never used is not a source.
    assert all("/tides" not in s["source"]["url"] for s in sources)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[::1]:8000/v1/models",
        "http://0.0.0.0:22/",
        "http://[::ffff:10.0.0.1]/",
        "http://127.0.0.2:5432/",  # loopback, but not the allow-listed 127.0.0.1
    ],
)
async def test_a_run_cannot_fetch_internal_addresses(
    openai: AsyncOpenAI, simulator: SimulatorServer, url: str
) -> None:
    script(simulator, call("web_fetch", url=url), answer("I could not read it."))
    completion = await openai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": f"Read {url}"}]
    )
    [result] = tool_results(simulator)
    assert result.startswith("Error: refused to connect to"), result
    assert "allow-list" in result
    assert completion.choices[0].message.annotations == []


async def test_stop_during_a_slow_fetch_ends_the_run_at_once(
    http: httpx.AsyncClient, simulator: SimulatorServer, web_server: WebServer
) -> None:
    slow = web_server.site.url("/slow?seconds=30")
    script(simulator, call("web_fetch", url=slow), answer("unreachable"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "wait"}]}
    asked_before = len(web_server.site.asked("/slow"))
    started = time.monotonic()
    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        fetching = lambda: len(web_server.site.asked("/slow")) > asked_before  # noqa: E731
        assert await until(fetching, server=web_server)
        assert (await http.post(f"/v1/runs/{run_id}/stop")).status_code == 202
        frames = sse_data("\n".join([line async for line in lines]))
    assert frames[-1]["hermes"]["exit_reason"] == "interrupted"
    assert time.monotonic() - started < 20, "the run waited for the page"
