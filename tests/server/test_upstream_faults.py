"""Upstream failures as a client of the server sees them: a fallback chain whose providers
fail before or during a streamed answer, and one whose providers all fail."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest
from pydantic import SecretStr

from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.base import Provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import Cooldowns, RetryPolicy
from server.app import create_app
from server.http.auth import KeyRing
from server.http.threaded import ThreadedServer
from server.profiles import Profile
from server.runs.manager import RunManager
from server.services import Services
from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.served import script, sse_data

KEY = "sk-upstream-0123456789abcdef"


def _provider(simulator: SimulatorServer, name: str) -> Provider:
    return create_provider(
        ProviderConfig(
            name=name,
            model=name,
            api_mode="chat_completions",
            base_url=simulator.base_url + "/v1",
            api_key=SecretStr("upstream-key"),
            timeout=10,
        )
    )


@pytest.fixture
def server(simulator: SimulatorServer) -> Iterator[ThreadedServer]:
    retry = RetryPolicy(base_delay=0.01, max_attempts=2, jitter=False, max_retry_after=1.0)
    chain = FallbackChain(
        [_provider(simulator, "primary"), _provider(simulator, "backup")],
        retry=retry,
        cooldowns=Cooldowns(),
    )
    services = Services(
        profiles=[Profile(id="fallback-agent", provider=chain)],
        keyring=KeyRing({KEY: "alice"}),
        runs=RunManager(),
    )
    with ThreadedServer(create_app(services)) as running:
        yield running


@pytest.fixture
async def http(server: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=server.base_url, headers=headers, timeout=30
    ) as client:
        yield client


def _request(*, stream: bool) -> dict[str, object]:
    return {
        "model": "fallback-agent",
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }


async def test_a_stream_cut_after_text_is_neither_retried_nor_answered_again_by_the_backup(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        "primary",
        Step(fault=Fault(status=429, retry_after=0.1)),
        Step(
            reply=Reply(text="Hello there, an answer cut short", chunk_count=4),
            fault=Fault(disconnect_after=3),
        ),
    )
    script(simulator, "backup", Step(reply=Reply(text="The backup's answer.")))

    response = await http.post("/v1/chat/completions", json=_request(stream=True))

    frames = sse_data(response.text)
    text = "".join(
        f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices")
    )
    assert text
    assert "Hello there, an answer cut short".startswith(text)  # once, not again
    assert frames[-1]["error"]["code"] == "server_error"
    assert "primary" in frames[-1]["error"]["message"]
    assert len(simulator.state.requests(scenario="primary")) == 2  # the 429, then the cut
    assert simulator.state.requests(scenario="backup") == []


async def test_every_provider_failing_is_a_502_naming_them_all(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, "primary", Step(fault=Fault(status=503, retry_after=0.1), repeat=5))
    script(simulator, "backup", Step(fault=Fault(status=500), repeat=5))

    response = await http.post("/v1/chat/completions", json=_request(stream=False))

    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "server_error"
    assert error["message"].startswith("every provider failed (primary, backup)")
    assert len(simulator.state.requests(scenario="backup")) == 2  # retried, then given up


async def test_every_provider_refusing_for_its_rate_is_a_429_the_sdk_retries(
    server: ThreadedServer, simulator: SimulatorServer
) -> None:
    # A 502 told the client the server was broken; OpenAI's SDKs wait and retry a 429 itself.
    script(simulator, "primary", Step(fault=Fault(status=429, retry_after=0.1), repeat=5))
    script(simulator, "backup", Step(fault=Fault(status=429, retry_after=0.2), repeat=5))
    async with openai.AsyncOpenAI(
        api_key=KEY, base_url=server.base_url + "/v1", max_retries=0, http_client=_plain()
    ) as client:
        with pytest.raises(openai.RateLimitError) as raised:
            await client.chat.completions.create(
                model="fallback-agent", messages=[{"role": "user", "content": "hi"}]
            )

    response = raised.value.response
    assert response.headers["retry-after"] == "1"  # the backup's 0.2 s, in whole seconds
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert error["message"].startswith("every provider failed (primary, backup)")


async def test_a_response_refused_for_its_rate_is_a_429_and_stored_as_rate_limited(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, "primary", Step(fault=Fault(status=429, retry_after=0.1), repeat=5))
    script(simulator, "backup", Step(fault=Fault(status=429, retry_after=0.1), repeat=5))

    response = await http.post(
        "/v1/responses", json={"model": "fallback-agent", "input": "hi", "store": False}
    )

    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    assert "retry-after" in response.headers


async def test_a_streamed_run_refused_for_its_rate_ends_on_a_rate_limit_error_frame(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    script(simulator, "primary", Step(fault=Fault(status=429, retry_after=0.1), repeat=5))
    script(simulator, "backup", Step(fault=Fault(status=429, retry_after=0.1), repeat=5))

    response = await http.post("/v1/chat/completions", json=_request(stream=True))

    assert response.status_code == 200  # the stream had begun: its end says what happened
    errors = [frame["error"] for frame in sse_data(response.text) if "error" in frame]
    assert [(e["type"], e["code"]) for e in errors] == [("rate_limit_error", "rate_limit_exceeded")]


def _plain() -> openai.DefaultAsyncHttpxClient:
    return openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED)
