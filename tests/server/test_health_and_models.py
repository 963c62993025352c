"""Health, model listing and the error envelope, over real HTTP with the official openai SDK."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from server.http.threaded import ThreadedServer
from server.openapi_dump import render
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE


async def test_health_answers_ok_without_a_key(hermes: ThreadedServer) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_models_lists_every_agent_profile(client: openai.AsyncOpenAI) -> None:
    models = [model async for model in client.models.list()]
    assert [m.id for m in models] == ["hermes-agent"]
    assert (models[0].model_extra or {})["name"] == "Hermes test agent"


async def test_a_model_shows_what_its_agent_can_do(client: openai.AsyncOpenAI) -> None:
    model = await client.models.retrieve("hermes-agent")
    tools = (model.model_extra or {})["hermes"]
    assert tools["toolsets"] == ["todo", "memory", "session_search", "delegate_task"]
    # The test profile's own tools, and the agent-level ones every run has.
    assert tools["tools"] == sorted(
        ["lookup", "wait", "hold", "todo", "memory", "session_search", "delegate_task"]
    )


async def test_retrieving_an_unknown_model_is_a_404_model_not_found(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await client.models.retrieve("gpt-nothing")
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/nowhere", 404), ("DELETE", "/v1/models", 405)],
)
async def test_routing_errors_use_the_openai_envelope(
    hermes: ThreadedServer, method: str, path: str, status: int
) -> None:
    auth = {"authorization": f"Bearer {KEY_ALICE}"}  # without one, every /v1/ path is a 401
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.request(method, path, headers=auth)
    assert response.status_code == status
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_committed_openapi_document_is_current() -> None:
    committed = Path(__file__).parents[2] / "openapi" / "openapi.json"
    assert committed.read_text() == render(), "run `make openapi` and commit openapi/openapi.json"
