"""Sessions over HTTP, on SQLite and on PostgreSQL: named conversations that keep their hidden
tool history, forks on edited history, one turn at a time, session_search, frozen memory, and
isolation between keys. (Store-level behaviour is tested in tests/hermes_core/persistence.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hermes_core.context import CompressingContext, Compressor
from hermes_core.context.compression import CompressionSettings
from hermes_core.persistence import Store
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.sessions.service import SessionSettings
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.databases import drop_database, fresh_database
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL, make_services

Message = dict[str, Any]


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def call(name: str, **arguments: Any) -> ToolCallSpec:
    return ToolCallSpec(name=name, arguments=arguments)


def text(reply: str) -> Step:
    return Step(reply=Reply(text=reply))


def tools(*calls: ToolCallSpec) -> Step:
    return Step(reply=Reply(tool_calls=list(calls)))


def upstream_messages(simulator: SimulatorServer) -> list[list[Message]]:
    """The messages of every upstream call so far, in order."""
    return [r.body["messages"] for r in simulator.state.requests(scenario=UPSTREAM_MODEL)]


@pytest.fixture
def settings() -> SessionSettings:
    return SessionSettings()


@pytest.fixture
def served(
    simulator: SimulatorServer, database_url: str, settings: SessionSettings
) -> Iterator[ThreadedServer]:
    services = make_services(
        simulator, database_url=database_url, migrate_on_start=True, session_settings=settings
    )
    with ThreadedServer(create_app(services)) as server:
        yield server


@pytest.fixture
async def http(served: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=served.base_url, timeout=30) as client:
        yield client


@pytest.fixture
async def store(database_url: str, served: ThreadedServer) -> AsyncIterator[Store]:
    """The server's database, opened beside it to check what it wrote."""
    opened = await Store.open(database_url, migrate=False)
    yield opened
    await opened.close()


async def chat(
    http: httpx.AsyncClient,
    messages: list[Message],
    *,
    session: str | None = None,
    key: str = KEY_ALICE,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    sent = {"authorization": f"Bearer {key}", **(headers or {})}
    if session is not None:
        sent["x-hermes-session-id"] = session
    return await http.post(
        "/v1/chat/completions",
        json={"model": "hermes-agent", "messages": messages},
        headers=sent,
    )


def answer(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def user(content: str) -> Message:
    return {"role": "user", "content": content}


def assistant(content: str) -> Message:
    return {"role": "assistant", "content": content}


async def test_a_named_session_continues_with_its_hidden_tool_history(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, tools(call("lookup", word="zebra")), text("Zebras are fine."), text("Yes."))
    first = await chat(http, [user("check zebra")], session="chat-1")
    assert answer(first) == "Zebras are fine."
    assert first.headers["x-hermes-session-id"] == "chat-1"
    assert first.json()["hermes"]["session_id"].startswith("sess_")  # the session's own id
    second = await chat(
        http, [user("check zebra"), assistant("Zebras are fine."), user("sure?")], session="chat-1"
    )
    assert answer(second) == "Yes."
    sent = upstream_messages(simulator)[-1]
    roles = [m["role"] for m in sent if m["role"] != "system"]
    # The tool call and its result, which the client never saw, are back in the history.
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert "definition of zebra" in sent[-3]["content"]


async def test_runs_naming_a_session_go_on_from_its_transcript(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    """A run's input is only its new message (a cron's, say): each run of a named session
    goes on from what the session holds, not from nothing."""
    script(simulator, tools(call("lookup", word="night")), text("Logs are quiet."), text("Same."))
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    body = {"model": "hermes-agent", "session": "nightly"}
    for said in ("Summarise the logs.", "And tonight?"):
        run = (await http.post("/v1/runs", json={**body, "input": said}, headers=auth)).json()
        async with http.stream("GET", f"/v1/runs/{run['id']}/events", headers=auth) as events:
            await events.aread()  # the run's events, to its end
        assert (await http.get(f"/v1/runs/{run['id']}", headers=auth)).json()["ended_at"]
    sent = upstream_messages(simulator)[-1]
    said_before = [(m["role"], m.get("content")) for m in sent if m["role"] != "system"]
    assert said_before[0] == ("user", "Summarise the logs.")
    assert ("assistant", "Logs are quiet.") in said_before
    assert [role for role, _ in said_before] == ["user", "assistant", "tool", "assistant", "user"]
    assert said_before[-1] == ("user", "And tonight?")


async def test_without_a_name_the_request_history_is_used(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, tools(call("lookup", word="zebra")), text("Fine."), text("Yes."))
    first = await chat(http, [user("check zebra")])
    assert answer(first) == "Fine."
    await chat(http, [user("check zebra"), assistant("Fine."), user("sure?")])
    roles = [m["role"] for m in upstream_messages(simulator)[-1] if m["role"] != "system"]
    assert roles == ["user", "assistant", "user"]
    # The unnamed session is named by its id: a client may continue it by that name.
    assert first.headers["x-hermes-session-id"].startswith("sess_")


async def test_an_edited_message_forks_a_child_session_and_keeps_the_original(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(
        simulator,
        tools(call("lookup", word="zebra")),
        text("Zebras are fine."),
        text("Lions too."),
        text("Tigers too."),
    )
    history = [user("check zebra"), assistant("Zebras are fine.")]
    answer(await chat(http, history[:1], session="chat-2"))
    answer(await chat(http, [*history, user("and lions?")], session="chat-2"))
    answer(await chat(http, [*history, user("and tigers?")], session="chat-2"))
    sent = upstream_messages(simulator)[-1]
    contents = [m.get("content") for m in sent]
    assert "and tigers?" in contents
    assert "and lions?" not in contents
    assert any(m["role"] == "tool" for m in sent)  # the fork kept the hidden tool history
    branches = await store.sessions.tips("alice", "chat-2")
    assert len(branches) == 2
    child, original = branches
    assert child.origin == "fork"
    assert child.parent_id == original.id
    kept = [m.message.get("content") for m in await store.sessions.messages(original.id)]
    assert kept[-2:] == ["and lions?", "Lions too."]


async def test_a_regenerated_answer_forks_at_the_user_message(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(simulator, text("First try."), text("Second try."))
    answer(await chat(http, [user("hello")], session="chat-3"))
    assert answer(await chat(http, [user("hello")], session="chat-3")) == "Second try."
    child, original = await store.sessions.tips("alice", "chat-3")
    assert [m.message.get("content") for m in await store.sessions.messages(child.id)] == [
        "hello",
        "Second try.",
    ]
    assert child.parent_id == original.id


@pytest.mark.parametrize("settings", [SessionSettings(busy="wait", wait_seconds=10)])
async def test_concurrent_turns_of_one_session_run_one_after_the_other(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, tools(call("wait", seconds=0.5)), text("first done"), text("second done"))
    first = asyncio.create_task(chat(http, [user("first")], session="busy"))
    await asyncio.sleep(0.2)
    second = await chat(
        http, [user("first"), assistant("first done"), user("second")], session="busy"
    )
    assert answer(await first) == "first done"
    assert answer(second) == "second done"
    # The second turn waited: it continued the first one's finished transcript.
    sent = upstream_messages(simulator)[-1]
    assert [m["role"] for m in sent if m["role"] != "system"] == [
        *("user", "assistant", "tool", "assistant", "user"),
    ]


@pytest.mark.parametrize("settings", [SessionSettings(busy="refuse")])
async def test_a_concurrent_turn_is_refused_when_configured(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, tools(call("wait", seconds=0.5)), text("first done"))
    first = asyncio.create_task(chat(http, [user("first")], session="busy"))
    await asyncio.sleep(0.2)
    refused = await chat(http, [user("second")], session="busy")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "session_busy"
    assert answer(await first) == "first done"


async def test_session_search_finds_an_earlier_conversation_by_a_word_in_a_tool_result(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(
        simulator,
        tools(call("lookup", word="quagga")),
        text("Looked it up."),
        tools(call("session_search", query="definition quagga")),
        text("Found it."),
    )
    earlier = await chat(http, [user("what is a quagga?")], session="earlier")
    answer(earlier)
    answer(await chat(http, [user("what did we find last time?")], session="later"))
    result = next(m for m in upstream_messages(simulator)[-1] if m["role"] == "tool")
    hits = json.loads(result["content"])
    assert [hit["title"] for hit in hits] == ["what is a quagga?"]
    assert "definition" in hits[0]["snippet"]


async def test_memory_reaches_the_next_session_but_not_the_one_that_wrote_it(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    note = call("memory", action="add", target="user", content="Likes green tea.")
    script(simulator, tools(note), text("Noted."), text("Again."), text("Hello."))
    answer(await chat(http, [user("I like green tea")], session="tea"))
    answer(
        await chat(http, [user("I like green tea"), assistant("Noted."), user("ok")], session="tea")
    )
    answer(await chat(http, [user("hi")], session="fresh"))
    systems = [m[0]["content"] for m in upstream_messages(simulator)]
    assert "green tea" not in systems[1]  # the writing session's prompt stays frozen
    assert "green tea" not in systems[2]
    assert "Likes green tea." in systems[3]  # a new session starts with it


async def test_a_memory_write_over_its_limit_is_refused_and_changes_nothing(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    huge = call("memory", action="add", target="user", content="x" * 2000)
    script(simulator, tools(huge), text("Too long."))
    answer(await chat(http, [user("remember this")]))
    result = next(m for m in upstream_messages(simulator)[-1] if m["role"] == "tool")
    assert result["content"].startswith("Error:")
    assert await store.memory.load("alice", "user") == []


async def test_a_memory_scope_header_keeps_memories_apart(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    note = call("memory", action="add", target="user", content="Prefers tabs.")
    script(simulator, tools(note), text("Noted."))
    scoped = {"x-hermes-memory-scope": "end-user-7"}
    answer(await chat(http, [user("tabs please")], headers=scoped))
    assert await store.memory.load("alice/end-user-7", "user") == ["Prefers tabs."]
    assert await store.memory.load("alice", "user") == []


async def test_a_memory_scope_keeps_conversations_apart_too(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    search = tools(call("session_search", query="zanzibar"))
    script(
        simulator,
        *(text("Noted."), search, text("Nothing."), text("A new trip."), search, text("Found.")),
    )
    seven, eight = {"x-hermes-memory-scope": "user-7"}, {"x-hermes-memory-scope": "user-8"}
    answer(await chat(http, [user("my trip to zanzibar")], session="trip", headers=seven))
    # Another end user of the same key neither finds that conversation ...
    answer(await chat(http, [user("where did I travel?")], headers=eight))
    found_by_eight = next(m for m in upstream_messages(simulator)[-1] if m["role"] == "tool")
    # ... nor continues it under the same session name.
    answer(await chat(http, [user("where did I travel?")], session="trip", headers=eight))
    continued = upstream_messages(simulator)[-1]
    assert "my trip to zanzibar" not in json.dumps(continued)
    found_by_seven_later = await chat(http, [user("where did I travel?")], headers=seven)
    assert found_by_seven_later.status_code == 200
    assert found_by_eight["content"].startswith("No sessions matched")
    hits = [m for m in upstream_messages(simulator)[-1] if m["role"] == "tool"]
    assert [hit["title"] for hit in json.loads(hits[-1]["content"])] == ["my trip to zanzibar"]


async def test_one_key_never_continues_or_reads_another_keys_session(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, tools(call("lookup", word="secret")), text("Alice's answer."), text("Hi."))
    alice = await chat(http, [user("alice's question")], session="shared")
    answer(alice)
    answer(
        await chat(
            http,
            [user("alice's question"), assistant("Alice's answer."), user("more")],
            session="shared",
            key=KEY_BOB,
        )
    )
    sent = upstream_messages(simulator)[-1]
    assert not any(m["role"] == "tool" for m in sent)  # Bob got a session of his own
    run = alice.headers["x-hermes-run-id"]
    hidden = await http.get(f"/v1/runs/{run}", headers={"authorization": f"Bearer {KEY_BOB}"})
    assert hidden.status_code == 404


async def test_a_bad_session_name_is_a_400(http: httpx.AsyncClient) -> None:
    response = await chat(http, [user("hi")], session="x" * 300)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "x-hermes-session-id"


async def test_the_transcript_is_saved_with_its_tool_calls_and_the_run_recorded(
    simulator: SimulatorServer, http: httpx.AsyncClient, store: Store
) -> None:
    script(simulator, tools(call("lookup", word="okapi")), text("Okapis are fine."))
    response = await chat(http, [user("check okapi")], session="saved")
    answer(response)
    (session,) = await store.sessions.tips("alice", "saved")
    saved = await store.sessions.messages(session.id)
    assert [(m.message["role"], m.source) for m in saved] == [
        ("user", "client"),
        ("assistant", "agent"),
        ("tool", "agent"),
        ("assistant", "agent"),
    ]
    assert saved[1].message["tool_calls"][0]["function"]["name"] == "lookup"
    assert session.usage.input_tokens > 0
    record = await store.runs.get("alice", response.headers["x-hermes-run-id"])
    assert record is not None
    assert (record.status, record.exit_reason, record.session_id) == (
        "completed",
        "completed",
        session.id,
    )


@pytest.fixture
def compressing(simulator: SimulatorServer, database_url: str) -> Iterator[ThreadedServer]:
    """A server whose agent compresses early: a 600-token window, one message kept at each end."""
    settings = CompressionSettings(protect_first_n=1, protect_last_n=2, min_tail_messages=2)
    services = make_services(
        simulator,
        database_url=database_url,
        migrate_on_start=True,
        context=CompressingContext(Compressor(None, settings)),
        context_window=600,
    )
    with ThreadedServer(create_app(services)) as server:
        yield server


async def test_a_compressed_session_goes_on_in_its_child_and_matches_the_full_history(
    simulator: SimulatorServer, compressing: ThreadedServer, database_url: str
) -> None:
    long_answers = [f"Answer {n}: " + "word " * 240 for n in (1, 2, 3)]
    script(simulator, *(text(a) for a in long_answers), text("Fourth."))
    history: list[Message] = []
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=compressing.base_url, timeout=30
    ) as http:
        for n, reply in enumerate([*long_answers, "Fourth."], start=1):
            history.append(user(f"question {n}"))
            assert answer(await chat(http, history, session="long")) == reply
            history.append(assistant(reply))
    last = upstream_messages(simulator)[-1]
    # The fourth turn ran on the compressed transcript, not on the whole history ...
    assert long_answers[1] not in [m.get("content") for m in last]
    assert any("SUMMARY" in str(m.get("content")) for m in last)
    assert last[-1]["content"] == "question 4"
    store = await Store.open(database_url, migrate=False)
    try:
        (child,) = await store.sessions.tips("alice", "long")
        assert child.origin == "compression"
        parent = await store.sessions.get("alice", child.base_id or "")
        assert parent is not None
        assert parent.end_reason == "compression"
        # ... and the client's full history was recognised as its continuation: no fork.
        logical = [m.stored.message.get("content") for m in await store.sessions.logical(child)]
        assert logical == [m["content"] for m in history]
    finally:
        await store.close()


async def test_open_webui_chat_id_names_the_session(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, tools(call("lookup", word="gnu")), text("Gnus are fine."), text("Sure."))
    openwebui = {"x-openwebui-chat-id": "0f9d-chat"}
    first = await chat(http, [user("check gnu")], headers=openwebui)
    assert first.headers["x-hermes-session-id"] == "0f9d-chat"
    history = [user("check gnu"), assistant(answer(first)), user("sure?")]
    answer(await chat(http, history, headers=openwebui))
    roles = [m["role"] for m in upstream_messages(simulator)[-1] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


@pytest.mark.postgres  # PostgreSQL only: make fast would start a cluster for this test alone
async def test_ready_is_503_once_the_database_is_gone(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    async with fresh_database("postgresql", tmp_path) as url:
        services = make_services(simulator, database_url=url, migrate_on_start=True)
        with ThreadedServer(create_app(services)) as server:
            async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=server.base_url) as http:
                assert (await http.get("/ready")).status_code == 200
                await drop_database(url)
                gone = await http.get("/ready")
        assert gone.status_code == 503
        assert gone.json()["error"]["message"] == "The database is not reachable."
