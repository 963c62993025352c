"""The hot path: well-formed, authenticated creates skip FastAPI; the routes answer the rest."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import NoReturn

import httpx
import pytest

from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

CREATE_PATHS = ("/v1/chat/completions", "/v1/responses")


class _Unreachable:
    async def create(self, *_: object) -> NoReturn:
        raise AssertionError("the FastAPI route served what the hot path should have")


@pytest.fixture
def hot_path_only(simulator: SimulatorServer) -> Iterator[ThreadedServer]:
    """A server whose FastAPI create routes fail if they are reached with a valid request."""
    app = create_app(make_services(simulator))
    app.state.chat = app.state.responses = _Unreachable()  # what the routes call
    with ThreadedServer(app) as server:
        yield server


def _bodies() -> dict[str, dict[str, object]]:
    return {
        "/v1/chat/completions": {
            "model": "hermes-agent",
            "messages": [{"role": "user", "content": "Hi"}],
        },
        "/v1/responses": {"model": "hermes-agent", "input": "Hi"},
    }


@pytest.mark.parametrize("path", CREATE_PATHS)
async def test_a_well_formed_create_is_served_without_the_fastapi_route(
    hot_path_only: ThreadedServer, simulator: SimulatorServer, path: str
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Hello!"))]))
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(base_url=hot_path_only.base_url) as http:
        served = await http.post(path, json=_bodies()[path], headers=auth)
        assert served.status_code == 200, served.text
        assert "Hello!" in served.text
        # An error of serving (an unknown model) is still answered by the app's handler.
        unknown = {**_bodies()[path], "model": "no-such-model"}
        refused = await http.post(path, json=unknown, headers=auth)
        assert refused.status_code == 404
        assert refused.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("path", CREATE_PATHS)
async def test_what_the_hot_path_does_not_take_the_route_answers(
    hermes: ThreadedServer, path: str
) -> None:
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    body = _bodies()[path]
    async with httpx.AsyncClient(base_url=hermes.base_url) as http:
        no_key = await http.post(path, json=body)
        assert no_key.status_code == 401
        not_json = await http.post(path, content=b"{not json", headers=auth)
        assert not_json.status_code == 400
        # FastAPI reads a body as JSON only when the request says it is.
        untyped = await http.post(path, content=json.dumps(body).encode(), headers=auth)
        assert untyped.status_code == 400
        assert untyped.json()["error"]["type"] == "invalid_request_error"


async def test_a_body_the_hot_path_hands_on_reaches_the_route_whole(
    hermes: ThreadedServer,
) -> None:
    # Sent in pieces and refused by validation: the route reads the same body and names the
    # bad parameter, as if no middleware had read it first.
    auth = {"authorization": f"Bearer {KEY_ALICE}"}

    async def pieces() -> AsyncIterator[bytes]:
        yield b'{"model": "hermes-agent", '
        yield b'"messages": [{"role": "user", "content": "Hi"}], "temperature": "hot"}'

    async with httpx.AsyncClient(base_url=hermes.base_url) as http:
        headers = {**auth, "content-type": "application/json"}
        response = await http.post("/v1/chat/completions", content=pieces(), headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "temperature", response.text
