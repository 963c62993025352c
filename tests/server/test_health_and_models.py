"""The server's first routes, reached over real HTTP with the official openai SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest

from server.app import create_app
from server.settings import ServerSettings
from server.threaded import ThreadedServer


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadedServer]:
    settings = ServerSettings(model_ids=["hermes-agent", "hermes-coder"])
    with ThreadedServer(create_app(settings)) as running:
        yield running


@pytest.fixture
async def client(server: ThreadedServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=server.base_url + "/v1",
        api_key="unused",
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


async def test_health_answers_ok(server: ThreadedServer) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        response = await http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_models_lists_every_agent_model(client: openai.AsyncOpenAI) -> None:
    models = [model.id async for model in client.models.list()]
    assert models == ["hermes-agent", "hermes-coder"]


async def test_retrieving_an_unknown_model_is_a_404_model_not_found(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.models.retrieve("gpt-nothing")
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/nowhere", 404), ("POST", "/v1/models", 405)],
)
async def test_routing_errors_use_the_openai_envelope(
    server: ThreadedServer, method: str, path: str, status: int
) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        response = await http.request(method, path)
    assert response.status_code == status
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_committed_openapi_document_is_current() -> None:
    from pathlib import Path

    from server.openapi_dump import render

    committed = Path(__file__).parents[2] / "openapi" / "openapi.json"
    assert committed.read_text() == render(), "run `make openapi` and commit openapi/openapi.json"
