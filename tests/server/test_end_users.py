"""End users behind one API key, in process (docs/end-users.md): who a request names, and
what that scopes — memory, sessions, run limits. Alice's key is a trusted front end, Bob's is
not. (Files, responses, skills: test_end_users_data.py; against a real serve process:
test_end_users_served.py.)"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from hermes_core.persistence import Store, sqlite_url
from hermes_core.providers.retry import Cooldowns
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.protocol.openwebui_tasks import TASK_HEADER
from server.replicas.cluster import Cluster
from server.runs.manager import RunManager
from server.services import Services
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.redis_server import redis_url_or_skip
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

Message = dict[str, Any]
RECALLING = "recalling-agent"
"""A profile that recalls the owner's earlier sessions (``memory.inject_episodes``)."""


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def remember(content: str) -> Step:
    call = ToolCallSpec(
        name="memory", arguments={"action": "add", "target": "user", "content": content}
    )
    return Step(reply=Reply(tool_calls=[call]))


def text(reply: str) -> Step:
    return Step(reply=Reply(text=reply))


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadedServer, Services]]:
    database = sqlite_url(tmp_path_factory.mktemp("end-users") / "hermes.db")
    services = make_services(
        _simulator_server,
        database_url=database,
        runs=RunManager(max_runs=8, max_runs_per_owner=3, max_runs_per_user=1),
    )
    (agent,) = services.profiles
    recalling = dataclasses.replace(
        agent, id=RECALLING, config=dataclasses.replace(agent.config, inject_episodes=2)
    )
    services.profiles = [agent, recalling]
    with ThreadedServer(create_app(services)) as server:
        yield server, services


@pytest.fixture
async def http(served: tuple[ThreadedServer, Services]) -> AsyncIterator[httpx.AsyncClient]:
    server, _ = served
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as client:
        yield client


@pytest.fixture
async def store(served: tuple[ThreadedServer, Services]) -> AsyncIterator[Store]:
    _, services = served
    assert services.database_url is not None
    opened = await Store.open(services.database_url, migrate=False)
    yield opened
    await opened.close()


async def until(predicate: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def as_key(key: str, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", **headers}


async def chat(
    http: httpx.AsyncClient, content: str, *, key: str = KEY_ALICE, **extra: Any
) -> httpx.Response:
    headers = extra.pop("headers", {})
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": content}], **extra}
    return await http.post("/v1/chat/completions", json=body, headers=as_key(key, **headers))


def ok(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text


async def test_the_body_names_the_end_user_safety_identifier_before_user(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(
        simulator, remember("Likes tea."), text("Noted."), remember("Likes coffee."), text("Ok.")
    )
    ok(await chat(http, "tea", user="u-tea"))
    ok(await chat(http, "coffee", user="ignored", safety_identifier="u-coffee"))
    assert await store.memory.load("alice/u-tea", "user") == ["Likes tea."]
    assert await store.memory.load("alice/u-coffee", "user") == ["Likes coffee."]
    assert await store.memory.load("alice/ignored", "user") == []


async def test_open_webui_user_headers_name_the_end_user_of_a_trusted_key(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(simulator, remember("Writes Rust."), text("Noted."))
    headers = {"x-openwebui-user-id": "owui-1", "x-openwebui-user-name": "Ann"}
    ok(await chat(http, "rust", headers=headers))
    assert await store.memory.load("alice/owui-1", "user") == ["Writes Rust."]


async def test_an_untrusted_key_naming_an_end_user_by_our_header_gets_a_403(
    http: httpx.AsyncClient,
) -> None:
    response = await chat(http, "hi", key=KEY_BOB, headers={"x-hermes-memory-scope": "u-1"})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "end_user_not_allowed"


async def test_an_untrusted_key_s_open_webui_users_and_body_user_share_its_memory(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(simulator, remember("Bob's team note."), text("Noted."), text("Hi."))
    ok(await chat(http, "note", key=KEY_BOB, headers={"x-openwebui-user-id": "owui-9"}))
    ok(await chat(http, "hi", key=KEY_BOB, user="u-9", safety_identifier="u-9"))
    assert await store.memory.load("bob", "user") == ["Bob's team note."]
    assert await store.memory.load("bob/owui-9", "user") == []


async def test_an_end_user_at_their_run_limit_gets_a_429_while_another_starts(
    simulator: SimulatorServer, http: httpx.AsyncClient, served: tuple[ThreadedServer, Services]
) -> None:
    _, services = served
    slow = Step(reply=Reply(text="slow " * 20, chunk_count=20), fault=Fault(chunk_delay=0.1))
    script(simulator, *[slow] * 4)
    streaming = {
        "model": "hermes-agent",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": True,
    }
    first = as_key(KEY_ALICE, **{"x-hermes-memory-scope": "u-busy"})
    held = await http.send(
        http.build_request("POST", "/v1/chat/completions", headers=first, json=streaming),
        stream=True,
    )
    try:
        assert held.status_code == 200
        refused = await http.post("/v1/chat/completions", headers=first, json=streaming)
        assert refused.status_code == 429
        assert refused.headers["retry-after"]
        error = refused.json()["error"]
        assert error["code"] == "rate_limit_exceeded"
        assert "end user" in error["message"]
        other = as_key(KEY_ALICE, **{"x-hermes-memory-scope": "u-free"})
        started = await http.send(
            http.build_request("POST", "/v1/chat/completions", headers=other, json=streaming),
            stream=True,
        )
        assert started.status_code == 200
        await started.aclose()
        # Open WebUI's side tasks (a title) count against their user's limit too.
        task = {**first, "x-openwebui-user-id": "ignored", TASK_HEADER: "title_generation"}
        titled = await http.post("/v1/chat/completions", headers=task, json=streaming)
        assert titled.status_code == 429
    finally:
        await held.aclose()
    assert await until(lambda: services.runs.live_runs() == 0)
    assert services.runs.live_runs("alice", "u-busy") == 0


async def test_an_end_user_at_their_limit_on_one_replica_is_refused_on_another() -> None:
    url = redis_url_or_skip()
    replicas = [
        Cluster(url, instance=f"inst_{uuid.uuid4().hex[:8]}", lease_seconds=5) for _ in "ab"
    ]
    for replica in replicas:
        await replica.start(
            on_stop=lambda *_: None,
            recover=_recover_none,
            live_instances=_no_instances,
            live_runs=list,
            cooldowns=Cooldowns(),
        )
    a, b = replicas
    key = f"key-{uuid.uuid4().hex[:8]}"
    try:
        assert await a.reserve_for_user(key, "ann", "run_1", limit=3, user_limit=1) is None
        assert await b.reserve_for_user(key, "ann", "run_2", limit=3, user_limit=1) == "user"
        assert await b.reserve_for_user(key, "ben", "run_3", limit=3, user_limit=1) is None
        # The refused run_2 was let go of in the key's count: one more still fits there.
        assert await _eventually(lambda: b.reserve(key, "run_4", 3))
        assert await b.reserve_for_user(key, "cy", "run_5", limit=3, user_limit=1) == "key"
        await a.release(key, "run_1", "ann")
        assert await _eventually(
            lambda: _reserved(b.reserve_for_user(key, "ann", "run_6", limit=3, user_limit=1))
        )
    finally:
        for replica in replicas:
            await replica.close()


async def _reserved(answer: Awaitable[str | None]) -> bool:
    return await answer is None


async def _no_instances() -> set[str]:
    return set()


async def _recover_none(_instance: str) -> int:
    return 0


async def _eventually(check: Callable[[], Awaitable[bool]]) -> bool:
    deadline = time.monotonic() + 30
    while not await check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_episodes_recall_only_the_end_user_s_own_sessions(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    ann, ben = {"x-hermes-memory-scope": "ann"}, {"x-hermes-memory-scope": "ben"}
    script(simulator, text("Booked."), text("Nothing."), text("You went to Zanzibar."))
    ok(await chat(http, "book my okapi safari in zanzibar", headers=ann))

    async def recalled(headers: dict[str, str]) -> str:
        ok(await chat(http, "the okapi safari?", model=RECALLING, headers=headers))
        sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
        return json.dumps(sent[1:])  # after the system prompt

    assert "book my okapi safari" not in await recalled(ben)
    assert "book my okapi safari" in await recalled(ann)
