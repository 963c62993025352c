"""The adapters' own upstream HTTP client: SSE line splitting, merging a burst of chunks, and
the environment's proxy."""

from __future__ import annotations

import asyncio
import json

import pytest

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers import upstream_http
from hermes_core.providers.base import ModelTextDelta, ProviderEvent, ToolCallDelta
from hermes_core.providers.upstream_http import SseData
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final, user
from tests.processes import free_port


def _data(*pieces: bytes) -> list[bytes]:
    frames = SseData()
    return [data for piece in pieces for data in frames.feed(piece)]


def test_sse_data_joins_lines_split_across_reads() -> None:
    pieces = (b'data: {"a"', b": 1", b'}\n\ndata: {"b": 2}\n', b"\ndata: [DONE]\n\n")
    assert _data(*pieces) == [b'{"a": 1}', b'{"b": 2}', b"[DONE]"]


def test_sse_data_skips_comments_event_names_and_keep_alives() -> None:
    body = b": keep-alive\n\nevent: message\ndata: {}\r\n\r\nretry: 10\n\n"
    assert _data(body) == [b"{}"]


def test_sse_data_drops_an_unterminated_last_line() -> None:
    # A frame without its newline was cut off mid-way; it must not be read as complete.
    assert _data(b'data: {"a": 1}\n\ndata: {"b"') == [b'{"a": 1}']


async def test_a_burst_of_chunks_arriving_at_once_becomes_one_delta_per_kind(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    # No delay between frames: the whole answer arrives in one read.
    tool_call = ToolCallSpec(name="lookup", arguments={"query": "a long argument " * 5})
    reply = Reply(reasoning="Think it over.", text="Hello there, world!", chunk_count=6)
    simulator.state.script("burst", Scenario(steps=[Step(reply=reply)]))
    events = await collect(make_provider("chat_completions", "burst"), user("hi"))
    kinds = [event.kind for event in events]
    assert kinds == ["reasoning_delta", "text_delta", "model_response"]
    response = final(events)
    assert response.message["content"] == "Hello there, world!"
    assert response.message["reasoning"] == "Think it over."

    simulator.state.script(
        "burst-call", Scenario(steps=[Step(reply=Reply(tool_calls=[tool_call], chunk_count=6))])
    )
    events = await collect(make_provider("chat_completions", "burst-call"), user("hi"))
    [delta] = [event for event in events if isinstance(event, ToolCallDelta)]
    assert (delta.id, delta.name) == (final(events).message["tool_calls"][0]["id"], "lookup")
    assert json.loads(delta.arguments) == {"query": "a long argument " * 5}


async def test_text_before_an_in_stream_error_is_passed_on_before_the_error(
    simulator: SimulatorServer, make_provider: ProviderFactory
) -> None:
    # No delay between frames: the text and the error frame may arrive in one read, and the
    # text must not be lost with it (nor the call retried as if nothing had been said).
    reply = Reply(text="Hello there, world!", chunk_count=6)
    fault = Fault(stream_error="server_error", disconnect_after=4)
    simulator.state.script("error-burst", Scenario(steps=[Step(reply=reply, fault=fault)]))
    seen: list[ProviderEvent] = []

    async def read() -> None:
        async for event in make_provider("chat_completions", "error-burst").stream(user("hi")):
            seen.append(event)

    with pytest.raises(ProviderError) as caught:
        await read()
    assert caught.value.kind is ErrorKind.SERVER_ERROR
    text = "".join(e.text for e in seen if isinstance(e, ModelTextDelta))
    assert text
    assert "Hello there, world!".startswith(text)


@pytest.fixture
def proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


async def test_calls_go_through_the_proxy_the_environment_names(
    simulator: SimulatorServer, make_provider: ProviderFactory, proxy_env: pytest.MonkeyPatch
) -> None:
    # The simulator serves absolute-form proxy requests like direct ones, so it can be the proxy
    # of an upstream whose host does not exist.
    simulator.state.script("m", Scenario(steps=[Step(reply=Reply(text="via the proxy"))]))
    proxy_env.setenv("HTTP_PROXY", simulator.base_url)
    provider = make_provider("chat_completions", "m", base_url="http://upstream.invalid/v1")
    assert final(await collect(provider, user("hi"))).message["content"] == "via the proxy"


async def test_no_proxy_hosts_are_called_directly(
    simulator: SimulatorServer, make_provider: ProviderFactory, proxy_env: pytest.MonkeyPatch
) -> None:
    simulator.state.script("m", Scenario(steps=[Step(reply=Reply(text="direct"))]))
    proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nobody there
    proxy_env.setenv("NO_PROXY", "127.0.0.1,localhost")
    provider = make_provider("chat_completions", "m")
    assert final(await collect(provider, user("hi"))).message["content"] == "direct"


async def test_posts_that_come_together_before_aiohttp_is_loaded_share_one_session(
    simulator: SimulatorServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def loading_takes_a_while(name: str) -> None:
        await asyncio.sleep(0.01)  # as the first import on a worker thread does

    monkeypatch.setattr(upstream_http, "import_off_loop", loading_takes_a_while)
    session = upstream_http.UpstreamSession(timeout=10)
    body = json.dumps({"model": "together", "messages": [{"role": "user", "content": "hi"}]})
    url = simulator.base_url + "/v1/chat/completions"

    async def post() -> object:
        async with session.post(url, body.encode(), {"content-type": "application/json"}) as r:
            await r.read()
            return session._session

    try:
        opened = await asyncio.gather(*(post() for _ in range(3)))
        assert len({id(s) for s in opened}) == 1
    finally:
        await session.aclose()
