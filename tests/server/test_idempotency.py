"""``Idempotency-Key``: a POST retried with the same key gets the first request's answer, and
its tools run once.

A real server (uvicorn on a thread, so the test counts what its tool did) in front of the
upstream simulator, the official SDK as the client. The SDK does not send the header itself
(its ``_idempotency_header`` is None for OpenAI), so the client sets it: its own retry resends
the request's headers, the key included.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest

from hermes_core import json_codec
from hermes_core.persistence import IdempotencyStore, Store, sqlite_url
from hermes_core.persistence.idempotency import Holder
from hermes_core.tools.registry import ToolContext
from server.app import create_app
from server.errors import APIError
from server.http import idempotency
from server.http.idempotency import Claim, Idempotency
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services
from tests.server.served import call, sse_data

pytestmark = pytest.mark.slow

SLOW_ANSWER_SECONDS = 3.5
"""How long the model takes over its answer, after the tool ran."""
CLIENT_TIMEOUT_SECONDS = 2.5
"""Shorter than the answer (the first try times out), longer than what is left of it when
the SDK's retry comes (about half a second later): the retry gets the answer. The retry waits
until 2 x 2.5 + 0.5 = 5.5 s, the answer comes at 3.5 s: the server may be 2 s late on a busy
machine, as with the 4.5 s and 3 s these were before."""


class Outbox:
    """A tool with a side effect the test counts: ``send_email`` appends here."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.posted = threading.Event()


def _services(
    simulator: SimulatorServer, data: Path, outbox: Outbox, instance: str = "replica-1"
) -> Services:
    # Each replica its own name, as ``serve`` gives it one (a name is one process's).
    services = make_services(
        simulator,
        database_url=sqlite_url(data / "hermes.db"),
        files_dir=data / "files",
        instance=instance,
    )

    @services.profiles[0].tools.tool(
        description="Send an email.",
        parameters={"type": "object", "properties": {"to": {"type": "string"}}},
    )
    async def send_email(arguments: dict[str, Any], ctx: ToolContext) -> str:
        outbox.sent.append(str(arguments.get("to")))
        outbox.posted.set()
        return "sent"

    return services


@pytest.fixture(scope="module")
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("idempotency")


@pytest.fixture(scope="module")
def replicas(
    _simulator_server: SimulatorServer, data: Path, outbox: Outbox
) -> Iterator[tuple[ThreadedServer, ThreadedServer]]:
    """Two replicas on one database (and one files volume)."""
    first = ThreadedServer(create_app(_services(_simulator_server, data, outbox)))
    second = ThreadedServer(create_app(_services(_simulator_server, data, outbox, "replica-2")))
    with first, second:
        yield first, second


@pytest.fixture
def server(replicas: tuple[ThreadedServer, ThreadedServer], outbox: Outbox) -> ThreadedServer:
    outbox.sent.clear()
    outbox.posted.clear()
    return replicas[0]


class Sent:
    """The requests a client sent (its retries included): their ``Idempotency-Key``s."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []

    async def __call__(self, request: httpx.Request) -> None:
        self.keys.append(request.headers.get("idempotency-key"))


@pytest.fixture
async def sent() -> Sent:
    return Sent()


def _sdk(base_url: str, sent: Sent | None = None, key: str = KEY_ALICE) -> openai.AsyncOpenAI:
    hooks: dict[str, list[Callable[..., Any]]] = {"request": [sent]} if sent is not None else {}
    return openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED, event_hooks=hooks),
        base_url=base_url + "/v1",
        api_key=key,
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture
async def client(server: ThreadedServer, sent: Sent) -> AsyncIterator[openai.AsyncOpenAI]:
    async with _sdk(server.base_url, sent) as sdk:
        yield sdk


def _script(simulator: SimulatorServer, *, slow: bool = True) -> None:
    """The model emails bob, then answers — slowly, when ``slow``."""
    delay = Fault(first_byte_delay=SLOW_ANSWER_SECONDS) if slow else None
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                call("send_email", to="bob@example.com"),
                Step(reply=Reply(text="Emailed bob."), fault=delay),
            ]
        ),
    )


def _model_calls(simulator: SimulatorServer) -> int:
    return len(simulator.state.requests(scenario=UPSTREAM_MODEL))


def _key() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


MESSAGES: Any = [{"role": "user", "content": "Email bob."}]


async def test_a_chat_completion_retried_after_a_client_timeout_runs_its_tools_once(
    client: openai.AsyncOpenAI, simulator: SimulatorServer, outbox: Outbox, sent: Sent
) -> None:
    _script(simulator)
    key = _key()
    retrying = client.with_options(timeout=CLIENT_TIMEOUT_SECONDS, max_retries=1)
    completion = await retrying.chat.completions.create(
        model="hermes-agent", messages=MESSAGES, extra_headers=key
    )
    assert completion.choices[0].message.content == "Emailed bob."
    assert sent.keys == [key["Idempotency-Key"]] * 2  # it timed out once; its retry, same key
    assert outbox.sent == ["bob@example.com"]
    assert _model_calls(simulator) == 2


async def test_a_response_retried_after_a_client_timeout_runs_its_tools_once(
    client: openai.AsyncOpenAI, simulator: SimulatorServer, outbox: Outbox, sent: Sent
) -> None:
    _script(simulator)
    key = _key()
    retrying = client.with_options(timeout=CLIENT_TIMEOUT_SECONDS, max_retries=1)
    response = await retrying.responses.create(
        model="hermes-agent", input="Email bob.", extra_headers=key
    )
    assert response.output_text == "Emailed bob."
    assert len(sent.keys) == 2
    assert outbox.sent == ["bob@example.com"]
    stored = await client.responses.retrieve(response.id)  # the one response there is
    assert stored.output_text == "Emailed bob."


async def test_a_streamed_retry_follows_the_first_stream_from_its_start(
    server: ThreadedServer, simulator: SimulatorServer, outbox: Outbox
) -> None:
    _script(simulator)
    key = _key()
    body = {"model": "hermes-agent", "input": "Email bob.", "stream": True}
    headers = {"authorization": f"Bearer {KEY_ALICE}", **key}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url) as http:
        async with http.stream("POST", "/v1/responses", json=body, headers=headers) as first:
            async for line in first.aiter_lines():
                if "response.created" in line:
                    break  # the client drops the stream early
        again = await http.post("/v1/responses", json=body, headers=headers, timeout=30)
    assert again.headers["idempotent-replayed"] == "true"
    events = sse_data(again.text)
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][-1]["content"][0]["text"] == "Emailed bob."
    assert outbox.sent == ["bob@example.com"]


async def test_a_retry_after_the_answer_gets_the_same_answer_again(
    client: openai.AsyncOpenAI, simulator: SimulatorServer, outbox: Outbox
) -> None:
    _script(simulator, slow=False)
    key = _key()
    first = await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=MESSAGES, extra_headers=key
    )
    again = await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=MESSAGES, extra_headers=key
    )
    assert again.headers["idempotent-replayed"] == "true"
    assert again.parse().id == first.parse().id
    assert again.headers["x-hermes-run-id"] == first.headers["x-hermes-run-id"]
    assert outbox.sent == ["bob@example.com"]


async def test_the_same_key_with_another_body_is_refused(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    _script(simulator, slow=False)
    key = _key()
    await client.chat.completions.create(model="hermes-agent", messages=MESSAGES, extra_headers=key)
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        await client.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": "Email carol."}],
            extra_headers=key,
        )
    assert refused.value.code == "idempotency_key_reused"


async def test_a_key_used_on_another_endpoint_is_refused(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    _script(simulator, slow=False)
    key = _key()
    await client.chat.completions.create(model="hermes-agent", messages=MESSAGES, extra_headers=key)
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        await client.responses.create(model="hermes-agent", input="Email bob.", extra_headers=key)
    assert refused.value.code == "idempotency_key_reused"
    assert "/v1/chat/completions" in refused.value.message


async def test_keys_are_per_api_key(
    server: ThreadedServer, client: openai.AsyncOpenAI, simulator: SimulatorServer, outbox: Outbox
) -> None:
    key = _key()
    _script(simulator, slow=False)
    await client.chat.completions.create(model="hermes-agent", messages=MESSAGES, extra_headers=key)
    _script(simulator, slow=False)
    async with _sdk(server.base_url, key=KEY_BOB) as bob:
        answer = await bob.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=MESSAGES, extra_headers=key
        )
    assert "idempotent-replayed" not in answer.headers  # bob's own request, not alice's answer
    assert outbox.sent == ["bob@example.com"] * 2


async def test_a_retry_on_another_replica_waits_for_the_answer(
    replicas: tuple[ThreadedServer, ThreadedServer],
    server: ThreadedServer,
    simulator: SimulatorServer,
    outbox: Outbox,
) -> None:
    _script(simulator)
    key = _key()
    async with _sdk(replicas[0].base_url) as first, _sdk(replicas[1].base_url) as second:
        started = asyncio.create_task(
            first.chat.completions.create(
                model="hermes-agent", messages=MESSAGES, extra_headers=key
            )
        )
        assert await asyncio.to_thread(outbox.posted.wait, 30)  # the first run is under way
        retried = await second.chat.completions.with_raw_response.create(
            model="hermes-agent", messages=MESSAGES, extra_headers=key
        )
        original = await started
    assert retried.headers["idempotent-replayed"] == "true"
    assert retried.parse().id == original.id
    assert outbox.sent == ["bob@example.com"]


async def test_an_upload_retried_with_its_key_is_kept_once(
    client: openai.AsyncOpenAI, tmp_path: Path
) -> None:
    key = _key()
    upload = tmp_path / "notes.txt"
    upload.write_text("kept once")
    first = await client.files.create(file=upload, purpose="user_data", extra_headers=key)
    again = await client.files.create(file=upload, purpose="user_data", extra_headers=key)
    assert again.id == first.id
    listed = [f.id for f in (await client.files.list()).data if f.filename == "notes.txt"]
    assert listed == [first.id]
    upload.write_text("another file")
    with pytest.raises(openai.UnprocessableEntityError):
        await client.files.create(file=upload, purpose="user_data", extra_headers=key)


async def test_a_skill_upload_retried_with_its_key_is_created_once(
    client: openai.AsyncOpenAI,
) -> None:
    key = _key()
    files: Any = [("SKILL.md", b"---\nname: mailer\ndescription: Mails.\n---\n\nBody\n")]
    first = await client.skills.create(files=files, extra_headers=key)
    again = await client.skills.create(files=files, extra_headers=key)  # else: name taken
    assert again.id == first.id


async def test_a_malformed_key_is_refused(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="hermes-agent", messages=MESSAGES, extra_headers={"Idempotency-Key": "a b"}
        )
    assert refused.value.code == "invalid_idempotency_key"


async def test_expired_keys_are_pruned(tmp_path: Path) -> None:
    store = await Store.open(sqlite_url(tmp_path / "keys.db"))
    try:
        keys: IdempotencyStore = store.idempotency
        await keys.claim("alice", "old", endpoint="/v1/files", fingerprint="f", now=0, ttl=10)
        await keys.claim("alice", "new", endpoint="/v1/files", fingerprint="f", now=100, ttl=10)
        assert await keys.prune(now=105) == 1
        assert await keys.get("alice", "old") is None
        assert await keys.get("alice", "new") is not None
    finally:
        await store.close()


async def test_a_retry_whose_first_request_died_with_its_replica_is_told_so_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(idempotency, "RUN_LOOK_SECONDS", 0.0)
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        claim = Claim(owner="alice", key="k-1", endpoint="/v1/responses", fingerprint="f")
        assert (
            await store.idempotency.claim(
                "alice", "k-1", endpoint=claim.endpoint, fingerprint="f", now=time.time(), ttl=60
            )
            is None
        )
        await store.idempotency.started("alice", "k-1", "run_dead")  # then its replica died

        class Runs:  # what crash recovery left of the run: interrupted a while ago
            instance = "replica-2"

            async def get(self, owner: str, run_id: str) -> object:
                return SimpleNamespace(status="interrupted", ended_at=time.time() - 60)

        keys = Idempotency(wait_seconds=30, poll_seconds=0.01)
        keys.store = store.idempotency
        keys.runs = Runs()  # type: ignore[assignment]
        sent: list[dict[str, Any]] = []

        async def send(message: Any) -> None:
            sent.append(message)

        async def work(receive: Any, send: Any) -> None:
            raise AssertionError("the work ran again")

        started = time.monotonic()
        await keys.serve(claim, work, _never, send)

        assert time.monotonic() - started < 10  # not the whole wait
        assert sent[0]["status"] == 422
        error = json_codec.loads(sent[1]["body"])["error"]
        assert error["code"] == "idempotency_key_interrupted"
        assert "run_dead" in error["message"]
        again = await store.idempotency.get("alice", "k-1")
        assert again is not None
        assert again.state == "done"  # the next retry is told at once
    finally:
        await store.close()


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError


# --- a claim whose request died ----------------------------------------------------------------
# In process, on the store: which claims a retry takes for dead. (Killed for real, served: see
# test_idempotency_crash.py.)

DEAD_CLAIM = Claim(owner="alice", key="k-dead", endpoint="/v1/responses", fingerprint="f")


class _NoRuns:
    """The run store as a retry reads it: this replica's name; no run recorded."""

    instance = "replica-1"

    async def get(self, owner: str, run_id: str) -> object:
        return None


async def _claimed_by_another_replica(
    store: Store, *, lease_left: float, run_id: str | None = None
) -> None:
    """The key claimed by a request of replica-2, whose claim's lease has ``lease_left``."""
    holder = Holder("replica-2", "its-life", lease_seconds=30)
    now = time.time()
    claimed = await store.idempotency.claim(
        "alice",
        "k-dead",
        endpoint="/v1/responses",
        fingerprint="f",
        now=now,
        ttl=60,
        holder=holder,
    )
    assert claimed is None
    await store.idempotency.renew("alice", "k-dead", holder, now=now + lease_left - 30)
    if run_id is not None:
        await store.idempotency.started("alice", "k-dead", run_id)


async def _retried(store: Store, *, wait_seconds: float = 30) -> tuple[list[Any], list[str]]:
    """A retry of the key on replica-1: what it sent, and what work it did."""
    keys = Idempotency(wait_seconds=wait_seconds, poll_seconds=0.01)
    keys.store = store.idempotency
    keys.runs = _NoRuns()  # type: ignore[assignment]
    sent: list[Any] = []
    did: list[str] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def work(receive: Any, send: Any) -> None:
        did.append("work")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    await keys.serve(DEAD_CLAIM, work, _never, send)
    return sent, did


async def _answered_by_replica_1(store: Store) -> None:
    """The key's answer is kept, made by the retry on replica-1."""
    kept = await store.idempotency.get("alice", "k-dead")
    assert kept is not None
    assert (kept.state, kept.instance) == ("done", "replica-1")


async def test_a_retry_does_the_work_of_a_request_whose_claim_s_lease_ran_out(
    tmp_path: Path,
) -> None:
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        await _claimed_by_another_replica(store, lease_left=-1)  # replica-2 died
        sent, did = await _retried(store)
        assert did == ["work"]
        assert sent[0]["status"] == 200
        await _answered_by_replica_1(store)
    finally:
        await store.close()


async def test_a_retry_waits_on_a_claim_whose_lease_is_renewed(tmp_path: Path) -> None:
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        await _claimed_by_another_replica(store, lease_left=30)  # replica-2 is answering it
        sent, did = await _retried(store, wait_seconds=0.5)
        assert did == []
        assert sent[0]["status"] == 409
        assert json_codec.loads(sent[1]["body"])["error"]["code"] == "idempotency_key_in_use"
    finally:
        await store.close()


async def test_a_retry_waiting_on_a_request_that_gives_the_key_up_does_the_work_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its first request did no work (a run the upstream refused for its rate is a 429 that
    gives the key up), and gave the key up after this retry saw it held: the retry is not
    told to retry again, it does the work."""
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    waiting = asyncio.Event()
    look = store.idempotency.get

    async def looked(owner: str, key: str) -> Any:
        waiting.set()  # the retry saw the key held, and waits for its answer
        return await look(owner, key)

    monkeypatch.setattr(store.idempotency, "get", looked)
    try:
        await _claimed_by_another_replica(store, lease_left=30)  # replica-2 is answering it
        retry = asyncio.create_task(_retried(store))
        await asyncio.wait_for(waiting.wait(), 30)
        await store.idempotency.release("alice", "k-dead", life="its-life")  # its 429

        sent, did = await asyncio.wait_for(retry, 30)
        assert did == ["work"]
        assert sent[0]["status"] == 200
        await _answered_by_replica_1(store)
    finally:
        await store.close()


async def test_a_retry_of_a_request_that_died_with_its_run_is_told_so_at_once(
    tmp_path: Path,
) -> None:
    """Its run may have acted (a tool ran): the retry does not do the work again, even before
    anyone recovered the run (nor when its record was never written)."""
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        await _claimed_by_another_replica(store, lease_left=-1, run_id="run_cut")
        started = time.monotonic()
        sent, did = await _retried(store)
        assert did == []
        assert time.monotonic() - started < 10  # not the whole wait
        assert sent[0]["status"] == 422
        error = json_codec.loads(sent[1]["body"])["error"]
        assert error["code"] == "idempotency_key_interrupted"
        assert "run_cut" in error["message"]
    finally:
        await store.close()


async def test_a_request_whose_claim_a_retry_took_over_starts_no_run(tmp_path: Path) -> None:
    """Its process froze past its lease and a retry, finding the claim dead, does the work:
    when the frozen request wakes and reaches its run's start, the run does not start."""
    store = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    keys = Idempotency()
    keys.store = store.idempotency
    keys.runs = _NoRuns()  # type: ignore[assignment]
    did: list[str] = []

    async def make() -> dict[str, Any]:
        claimed = await store.idempotency.get("alice", "k-dead")
        assert claimed is not None
        retry = Holder("replica-2", "the-retry", lease_seconds=30)
        assert await store.idempotency.take_over(claimed, retry, now=time.time())
        await idempotency.note_run("run_frozen")  # where serving starts its run
        did.append("work")
        return {}

    try:
        with pytest.raises(APIError) as refused:
            await keys.once(DEAD_CLAIM, make)
        assert (refused.value.status, refused.value.code) == (409, "idempotency_key_in_use")
        assert did == []
        kept = await store.idempotency.get("alice", "k-dead")
        assert kept is not None
        assert (kept.state, kept.life, kept.run_id) == ("running", "the-retry", None)
    finally:
        await store.close()


async def test_a_non_streamed_answer_s_run_is_noted_with_its_key_before_its_tools_run(
    server: ThreadedServer, data: Path, simulator: SimulatorServer, outbox: Outbox
) -> None:
    """A non-streamed answer names its run only once it is whole; were its server to die
    meanwhile, a claim without its run would be taken over, and its tools run again."""
    _script(simulator)  # the answer comes seconds after the tool ran
    key = _key()
    store = await Store.open(sqlite_url(data / "hermes.db"), migrate=False)
    try:

        async def claimed_run() -> str | None:
            claimed = await store.idempotency.get("alice", key["Idempotency-Key"])
            return claimed.run_id if claimed is not None and claimed.state == "running" else None

        async with _sdk(server.base_url) as client:
            answering = asyncio.create_task(_raw_completion(client, key))
            assert await asyncio.to_thread(outbox.posted.wait, 30)  # its tool ran
            noted = await claimed_run()  # before the run started, not some time after
            answer = await answering
    finally:
        await store.close()
    assert noted == answer.headers["x-hermes-run-id"]


async def _raw_completion(client: openai.AsyncOpenAI, key: dict[str, str]) -> Any:
    return await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=MESSAGES, extra_headers=key
    )


# --- POST /v1/runs ------------------------------------------------------------------------------
# The SDKs have no runs: plain HTTP, as a pipeline sends it.


def _script_a_run(simulator: SimulatorServer, *, slow: bool = True) -> None:
    """One model call: the run's answer (slow, when ``slow``: a retry comes while it runs)."""
    delay = Fault(first_byte_delay=SLOW_ANSWER_SECONDS) if slow else None
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Summarised."), fault=delay)])
    )


def _run_body(session: str, text: str = "Summarise the night's logs.") -> dict[str, Any]:
    return {"model": "hermes-agent", "input": text, "session": session, "metadata": {"job": "n"}}


async def _create_run(
    base_url: str, body: dict[str, Any], key: dict[str, str], api_key: str = KEY_ALICE, **more: str
) -> httpx.Response:
    headers = {"authorization": f"Bearer {api_key}", **key, **more}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=base_url, timeout=30) as http:
        return await http.post("/v1/runs", json=body, headers=headers)


async def _runs_of(
    base_url: str, session: str, api_key: str = KEY_ALICE, *, until_ended: bool = True
) -> list[dict[str, Any]]:
    """The key's runs of ``session`` (``GET /v1/runs``), once none of them is running (or
    once there is one, without ``until_ended``)."""
    headers = {"authorization": f"Bearer {api_key}"}
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=base_url, headers=headers) as http:
        while True:
            listed = await http.get("/v1/runs", params={"session": session})
            assert listed.status_code == 200, listed.text
            runs: list[dict[str, Any]] = listed.json()["data"]
            ended = all(run["ended_at"] is not None for run in runs)
            if (ended if until_ended else runs) or time.monotonic() > deadline:
                return runs
            await asyncio.sleep(0.05)


async def test_a_run_created_again_with_its_key_while_it_runs_is_the_same_run(
    server: ThreadedServer, simulator: SimulatorServer
) -> None:
    _script_a_run(simulator)
    key, session = _key(), f"nightly-{uuid.uuid4()}"
    first = await _create_run(server.base_url, _run_body(session), key)
    again = await _create_run(server.base_url, _run_body(session), key)  # its 202 was lost
    assert first.status_code == again.status_code == 202, again.text
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
    assert again.json()["status"] in ("queued", "running")  # as the first answer said
    assert again.headers["x-hermes-run-id"] == first.json()["id"]
    runs = await _runs_of(server.base_url, session)
    assert [run["id"] for run in runs] == [first.json()["id"]]
    assert runs[0]["status"] == "completed"
    assert _model_calls(simulator) == 1


async def test_a_run_created_again_with_its_key_after_it_ended_is_the_same_run_on_any_replica(
    replicas: tuple[ThreadedServer, ThreadedServer],
    server: ThreadedServer,
    simulator: SimulatorServer,
) -> None:
    _script_a_run(simulator, slow=False)
    key, session = _key(), f"nightly-{uuid.uuid4()}"
    first = await _create_run(replicas[0].base_url, _run_body(session), key)
    assert first.status_code == 202, first.text
    assert [run["status"] for run in await _runs_of(replicas[0].base_url, session)] == ["completed"]
    again = await _create_run(replicas[1].base_url, _run_body(session), key)
    assert again.status_code == 202, again.text
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()  # the first answer, not the run as it is now
    assert len(await _runs_of(replicas[1].base_url, session)) == 1
    assert _model_calls(simulator) == 1


async def test_a_run_created_with_a_used_key_and_another_body_is_refused(
    server: ThreadedServer, simulator: SimulatorServer
) -> None:
    _script_a_run(simulator, slow=False)
    key, session = _key(), f"nightly-{uuid.uuid4()}"
    first = await _create_run(server.base_url, _run_body(session), key)
    assert first.status_code == 202, first.text
    other = await _create_run(server.base_url, _run_body(session, "Summarise the day's."), key)
    assert other.status_code == 422, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert len(await _runs_of(server.base_url, session)) == 1


async def test_run_keys_are_per_api_key(server: ThreadedServer, simulator: SimulatorServer) -> None:
    _script_a_run(simulator, slow=False)
    key, session = _key(), f"nightly-{uuid.uuid4()}"
    alices = await _create_run(server.base_url, _run_body(session), key)
    _script_a_run(simulator, slow=False)
    bobs = await _create_run(server.base_url, _run_body(session), key, api_key=KEY_BOB)
    assert alices.status_code == bobs.status_code == 202, bobs.text
    assert "idempotent-replayed" not in bobs.headers  # bob's own run, not alice's answer
    assert bobs.json()["id"] != alices.json()["id"]
    assert [run["id"] for run in await _runs_of(server.base_url, session, KEY_BOB)] == [
        bobs.json()["id"]
    ]


async def test_run_keys_are_per_end_user(
    server: ThreadedServer, simulator: SimulatorServer
) -> None:
    _script_a_run(simulator, slow=False)
    key, session = _key(), f"nightly-{uuid.uuid4()}"
    ann = await _create_run(
        server.base_url, _run_body(session), key, **{"x-openwebui-user-id": "ann"}
    )
    assert ann.status_code == 202, ann.text
    ben = await _create_run(
        server.base_url, _run_body(session), key, **{"x-openwebui-user-id": "ben"}
    )
    assert ben.status_code == 422, ben.text  # never ann's run
    assert ben.json()["error"]["code"] == "idempotency_key_reused"


async def test_a_run_created_again_while_its_create_waits_on_a_busy_session_is_one_run(
    server: ThreadedServer, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(text="Chatted."), fault=Fault(first_byte_delay=2.0)),
                Step(reply=Reply(text="Summarised.")),
            ]
        ),
    )
    key, session = _key(), f"nightly-{uuid.uuid4()}"
    headers = {"authorization": f"Bearer {KEY_ALICE}", "x-hermes-session-id": session}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        chatting = asyncio.create_task(
            http.post(
                "/v1/chat/completions",
                json={"model": "hermes-agent", "messages": MESSAGES},
                headers=headers,
            )
        )
        # The chat turn holds the session: the run's create waits for it to end.
        assert await _runs_of(server.base_url, session, until_ended=False)
        first, again = await asyncio.gather(
            _create_run(server.base_url, _run_body(session), key),
            _create_run(server.base_url, _run_body(session), key),
        )
        assert (await chatting).status_code == 200
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert first.json() == again.json()
    replayed = [answer.headers.get("idempotent-replayed") for answer in (first, again)]
    assert replayed.count("true") == 1  # one started it, the other waited for its answer
    runs = [run for run in await _runs_of(server.base_url, session) if run["endpoint"] == "runs"]
    assert [run["id"] for run in runs] == [first.json()["id"]]
    assert _model_calls(simulator) == 2  # the chat turn's, the run's


async def test_a_turn_refused_because_its_session_was_busy_runs_when_retried_with_its_key(
    server: ThreadedServer, simulator: SimulatorServer
) -> None:
    """A 409 ``session_busy`` did no work: the key is given up, so the retry (the SDKs retry a
    409 themselves) runs the turn instead of being told "busy" again for a day."""
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(reply=Reply(text="Chatted."), fault=Fault(first_byte_delay=2.0)),
                Step(reply=Reply(text="Answered on the retry.")),
            ]
        ),
    )
    session = f"busy-{uuid.uuid4()}"
    headers = {"authorization": f"Bearer {KEY_ALICE}", "x-hermes-session-id": session}
    body = {"model": "hermes-agent", "messages": MESSAGES}
    refusing = {**headers, **_key(), "x-hermes-session-busy": "reject"}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        chatting = asyncio.create_task(
            http.post("/v1/chat/completions", json=body, headers=headers)
        )
        assert await _runs_of(server.base_url, session, until_ended=False)  # it holds the session
        refused = await http.post("/v1/chat/completions", json=body, headers=refusing)
        assert (await chatting).status_code == 200
        await _runs_of(server.base_url, session)  # the first turn has ended
        retried = await http.post("/v1/chat/completions", json=body, headers=refusing)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "session_busy"
    assert retried.status_code == 200, retried.text
    assert retried.json()["choices"][0]["message"]["content"] == "Answered on the retry."
    assert "idempotent-replayed" not in retried.headers


# --- what a replay carries -----------------------------------------------------------------------


REPLAYED_REQUESTS: Any = {
    "/v1/chat/completions": {"model": "hermes-agent", "messages": MESSAGES},
    "/v1/responses": {"model": "hermes-agent", "input": "Email bob."},
    "/v1/runs": {"model": "hermes-agent", "input": "Email bob.", "session": "replayed"},
}


@pytest.mark.parametrize("path", list(REPLAYED_REQUESTS))
async def test_a_replayed_answer_carries_the_first_answer_s_headers(
    server: ThreadedServer, simulator: SimulatorServer, path: str
) -> None:
    _script_a_run(simulator, slow=False)
    headers = {"authorization": f"Bearer {KEY_ALICE}", "x-hermes-session-id": "replayed", **_key()}
    body = REPLAYED_REQUESTS[path]
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url, timeout=30) as http:
        first = await http.post(path, json=body, headers=headers)
        await _runs_of(server.base_url, "replayed")  # ended: the retry gets the kept answer
        again = await http.post(path, json=body, headers=headers)
    assert first.status_code == again.status_code, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert "x-hermes-session-id" in first.headers

    def own(answer: httpx.Response) -> dict[str, str]:
        return {
            name: value for name, value in answer.headers.items() if name.startswith("x-hermes-")
        }

    assert own(again) == own(first)
    assert again.headers["content-type"] == first.headers["content-type"]
