"""Text no store can hold (NUL, lone surrogates), on SQLite and on PostgreSQL: a client that
sends it gets a 400 and nobody else loses anything; a model that says it is stored cleaned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

ALICE = {"authorization": f"Bearer {KEY_ALICE}"}
BOB = {"authorization": f"Bearer {KEY_BOB}"}
# As JSON text, the escapes a client's encoder writes (the characters cannot be raw in JSON).
SURROGATE = b'"lone \\ud800 surrogate"'
NUL = b'"nul \\u0000 char"'


@pytest.fixture
def services(simulator: SimulatorServer, database_url: str) -> Services:
    return make_services(simulator, database_url=database_url, migrate_on_start=True)


@pytest.fixture
def served(services: Services) -> Iterator[ThreadedServer]:
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(served: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=served.base_url, timeout=30) as client:
        yield client


@pytest.fixture
async def store(database_url: str, served: ThreadedServer) -> AsyncIterator[Store]:
    opened = await Store.open(database_url, migrate=False)
    yield opened
    await opened.close()


def _chat_body(text: bytes, *, stream: bool = False) -> bytes:
    streamed = b', "stream": true' if stream else b""
    return b'{"model": "hermes-agent"%s, "messages": [{"role": "user", "content": %s}]}' % (
        streamed,
        text,
    )


def _responses_body(text: bytes) -> bytes:
    return b'{"model": "hermes-agent", "input": %s}' % text


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize("text", [SURROGATE, NUL], ids=["surrogate", "nul"])
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", _chat_body),
        ("/v1/responses", _responses_body),
        ("/v1/responses/compact", _responses_body),
    ],
    ids=["chat", "responses", "compact"],
)
async def test_unstorable_text_in_a_body_is_a_400_and_another_keys_turn_lands(
    simulator: SimulatorServer,
    services: Services,
    http: httpx.AsyncClient,
    store: Store,
    path: str,
    body: Any,
    text: bytes,
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="hi bob"))]))
    bad, good = await asyncio.gather(
        http.post(path, content=body(text), headers={**ALICE, **JSON}),
        http.post(
            "/v1/chat/completions",
            content=_chat_body(b'"hello"'),
            headers={**BOB, **JSON, "x-hermes-session-id": "bobs"},
        ),
    )
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert ("NUL" if text is NUL else "lone surrogate") in error["message"]
    assert good.status_code == 200, good.text
    (session,) = await store.sessions.tips("bob", "bobs")
    saved = await store.sessions.messages(session.id)
    assert [m.message["content"] for m in saved] == ["hello", "hi bob"]
    assert services.runs.live_runs() == 0


@pytest.mark.parametrize("text", [SURROGATE, NUL], ids=["surrogate", "nul"])
async def test_unstorable_text_in_a_header_named_session_is_refused_the_same_way_streamed(
    http: httpx.AsyncClient, text: bytes
) -> None:
    response = await http.post(
        "/v1/chat/completions",
        content=_chat_body(text, stream=True),
        headers={**ALICE, **JSON, "x-hermes-session-id": "streamed"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/v1/runs/run_%00"),
        ("POST", "/v1/runs/run_%00/stop"),
        ("GET", "/v1/runs/run_%00/events"),
        ("GET", "/v1/responses/resp_%00"),
        ("DELETE", "/v1/responses/resp_%00"),
        ("POST", "/v1/responses/resp_%00/cancel"),
        ("GET", "/v1/responses/resp_%00/input_items"),
        ("GET", "/v1/responses/resp_x/input_items?after=%00"),
        ("GET", "/v1/models/hermes%00"),
    ],
)
async def test_a_nul_in_the_url_is_a_400(http: httpx.AsyncClient, method: str, url: str) -> None:
    response = await http.request(method, url, headers=ALICE)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_url"


async def test_a_nul_in_a_models_reply_is_stored_cleaned_beside_another_keys_turn(
    simulator: SimulatorServer, services: Services, http: httpx.AsyncClient, store: Store
) -> None:
    # Both replies are saved in the same write batch; one cannot be stored as it is on
    # PostgreSQL (SQLite holds NUL), and must not cost the other.
    replies = [Step(reply=Reply(text="odd \x00 reply")), Step(reply=Reply(text="fine reply"))]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=replies))

    async def turn(key: dict[str, str], name: str) -> httpx.Response:
        return await http.post(
            "/v1/chat/completions",
            json={"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]},
            headers={**key, "x-hermes-session-id": name},
        )

    answers = await asyncio.gather(turn(ALICE, "a"), turn(BOB, "b"))
    assert [a.status_code for a in answers] == [200, 200]
    saved: list[str] = []
    for owner, name in [("alice", "a"), ("bob", "b")]:
        (session,) = await store.sessions.tips(owner, name)
        saved += [str(m.message["content"]) for m in await store.sessions.messages(session.id)]
    odd = "odd \x00 reply" if store.db.dialect == "sqlite" else "odd \ufffd reply"
    assert sorted(saved) == sorted(["hi", "hi", odd, "fine reply"])
    assert services.runs.live_runs() == 0
