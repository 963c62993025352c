"""The hot path: well-formed, authenticated creates skip FastAPI; the routes answer the rest."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import NoReturn

import httpx
import pytest

from server.app import create_app
from server.http.threaded import ThreadedServer
from server.metrics import Metrics
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
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
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hot_path_only.base_url) as http:
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
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
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

    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        headers = {**auth, "content-type": "application/json"}
        response = await http.post("/v1/chat/completions", content=pieces(), headers=headers)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "temperature", response.text


class _Crashing:
    async def create(self, *_: object) -> NoReturn:
        raise RuntimeError("a bug while serving")


@pytest.fixture
def crashing(simulator: SimulatorServer) -> Iterator[tuple[ThreadedServer, Metrics]]:
    """A server whose serving objects crash on every create the hot path takes."""
    services = make_services(simulator)
    app = create_app(services)
    assert app.hot_path is not None
    app.hot_path.routes = {
        path: replace(route, create=_Crashing().create)
        for path, route in app.hot_path.routes.items()
    }
    with ThreadedServer(app) as server:
        yield server, services.metrics


async def test_a_crash_while_serving_is_the_apps_500_envelope_and_counted(
    crashing: tuple[ThreadedServer, Metrics],
) -> None:
    server, metrics = crashing
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    labels = {"endpoint": "chat_completions", "status": "500"}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url) as http:
        response = await http.post(
            "/v1/chat/completions", json=_bodies()["/v1/chat/completions"], headers=auth
        )
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"
    assert metrics.registry.get_sample_value("hermes_requests_total", labels) == 1


async def test_a_served_create_is_counted_once_by_endpoint_and_status(
    simulator: SimulatorServer,
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Hello!"))]))
    services = make_services(simulator)
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    labels = {"endpoint": "responses", "status": "200"}
    with ThreadedServer(create_app(services)) as server:
        async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url) as http:
            served = await http.post("/v1/responses", json=_bodies()["/v1/responses"], headers=auth)
        assert served.status_code == 200, served.text
        assert services.metrics.registry.get_sample_value("hermes_requests_total", labels) == 1


async def test_the_apps_own_refusals_still_answer_what_the_hot_path_hands_on(
    hermes: ThreadedServer,
) -> None:
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    body = _bodies()["/v1/chat/completions"]
    huge = {**body, "messages": [{"role": "user", "content": "x" * 300_000}]}

    async def unannounced() -> AsyncIterator[bytes]:  # no content-length: counted as it comes
        encoded = json.dumps(huge).encode()
        for start in range(0, len(encoded), 65_536):
            yield encoded[start : start + 65_536]

    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        nul = await http.post("/v1/chat/completions?x=%00", json=body, headers=auth)
        assert nul.status_code == 400
        assert nul.json()["error"]["code"] == "invalid_url"
        headers = {**auth, "content-type": "application/json"}
        streamed = await http.post("/v1/chat/completions", content=unannounced(), headers=headers)
        assert streamed.status_code == 413, streamed.text
        assert streamed.json()["error"]["code"] == "body_too_large"
        announced = await http.post("/v1/chat/completions", json=huge, headers=auth)
        assert announced.status_code == 413
