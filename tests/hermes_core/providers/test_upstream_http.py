"""The adapters' own upstream HTTP client: SSE line splitting and the environment's proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermes_core.providers.upstream_http import sse_data
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.hermes_core.providers.conftest import ProviderFactory, collect, final, user
from tests.processes import free_port


async def _pieces(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


async def _data(*pieces: bytes) -> list[bytes]:
    return [data async for data in sse_data(_pieces(*pieces))]


async def test_sse_data_joins_lines_split_across_reads() -> None:
    pieces = (b'data: {"a"', b": 1", b'}\n\ndata: {"b": 2}\n', b"\ndata: [DONE]\n\n")
    assert await _data(*pieces) == [b'{"a": 1}', b'{"b": 2}', b"[DONE]"]


async def test_sse_data_skips_comments_event_names_and_keep_alives() -> None:
    body = b": keep-alive\n\nevent: message\ndata: {}\r\n\r\nretry: 10\n\n"
    assert await _data(body) == [b"{}"]


async def test_sse_data_drops_an_unterminated_last_line() -> None:
    # A frame without its newline was cut off mid-way; it must not be read as complete.
    assert await _data(b'data: {"a": 1}\n\ndata: {"b"') == [b'{"a": 1}']


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
