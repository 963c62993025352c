"""The planner (a profile's ``planner: true``) against a real ``serve`` process: the plan is
shown before the first tool runs — as reasoning in a chat stream, as a ``plan`` event in the
run's native event stream — and a new plan is made, and said, after too many tool calls failed.

The tool is the files toolset's ``read_file`` on files that are not there (its answer is an
``Error: …``): it fails without a sandbox, so these run everywhere."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.served import (
    Served,
    answer,
    call,
    calls,
    http_client,
    script,
    sdk_client,
    serving,
    simulated_provider,
    sse_data,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "planner-upstream"
KEY = "sk-planner-alice-0123456789"
MODEL = "planner-agent"

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
providers:
{provider}profiles:
  - id: {model}
    providers: [sim]
    tools: [files]
    planner: true
"""

PLAN = "1. Read notes.txt\n2. Check the numbers in it\n3. Write the summary"


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("planner")
    provider = simulated_provider(_simulator_server, UPSTREAM)
    with serving(data, CONFIG.format(data=data, key=KEY, provider=provider, model=MODEL)) as server:
        yield server


@pytest.fixture
async def openai(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY) as client:
        yield client


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, KEY) as client:
        yield client


async def _streamed(openai: AsyncOpenAI, text: str) -> tuple[list[str], str]:
    """The reasoning pieces a chat stream showed, in order, and the run's id."""
    stream = await openai.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": text}], stream=True
    )
    reasoning: list[str] = []
    run_id = ""
    async for chunk in stream:
        extra: dict[str, Any] = chunk.model_extra or {}
        run_id = (extra.get("hermes") or {}).get("run_id") or run_id
        if chunk.choices:
            piece = (chunk.choices[0].delta.model_extra or {}).get("reasoning_content")
            if piece:
                reasoning.append(piece)
    assert run_id, "the stream's last chunk names its run"
    return reasoning, run_id


async def _events(http: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    response = await http.get(f"/v1/runs/{run_id}/events")
    assert response.status_code == 200
    return sse_data(response.text)


def _first(pieces: list[str], start: str) -> int:
    return next(i for i, piece in enumerate(pieces) if piece.startswith(start))


async def test_a_chat_stream_shows_the_plan_as_reasoning_before_the_tool_runs(
    simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer(PLAN), call("read_file", path="notes.txt"), answer("Done."))
    reasoning, _ = await _streamed(openai, "Summarise the numbers in notes.txt")
    plan = _first(reasoning, "Plan:")
    assert reasoning[plan] == (
        "Plan:\n1. Read notes.txt\n2. Check the numbers in it\n3. Write the summary\n"
    )
    assert plan < _first(reasoning, "→ read_file")


async def test_open_webui_shows_the_plan_as_status_lines_before_the_tool_runs(
    simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, UPSTREAM, answer(PLAN), call("read_file", path="notes.txt"), answer("Done."))
    response = await http.post(
        "/v1/chat/completions",
        headers={"x-openwebui-chat-id": "planned-chat"},
        json={
            "model": MODEL,
            "stream": True,
            "messages": [{"role": "user", "content": "Summarise the numbers in notes.txt"}],
        },
    )
    assert response.status_code == 200
    statuses = [
        f["event"]["data"]
        for f in sse_data(response.text)
        if f.get("event", {}).get("type") == "status"
    ]
    lines = [status["description"] for status in statuses]
    plan = lines.index("Plan: 3 steps")
    assert lines[plan + 1 : plan + 4] == [
        "1. Read notes.txt",
        "2. Check the numbers in it",
        "3. Write the summary",
    ]
    assert all(status["done"] for status in statuses[plan : plan + 4])
    assert plan < next(i for i, line in enumerate(lines) if "read_file" in line)


async def test_a_responses_stream_shows_the_plan_as_a_reasoning_summary(
    simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer(PLAN), call("read_file", path="notes.txt"), answer("Done."))
    stream = await openai.responses.create(
        model=MODEL, input="Summarise the numbers in notes.txt", stream=True
    )
    summaries = [
        event.text async for event in stream if event.type == "response.reasoning_summary_text.done"
    ]
    plan = _first(summaries, "Plan:")
    assert summaries[plan].startswith("Plan:\n1. Read notes.txt\n")
    assert plan < _first(summaries, "→ read_file")


async def test_the_runs_event_stream_has_the_plan_before_the_first_tool(
    simulator: SimulatorServer, openai: AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    script(simulator, UPSTREAM, answer(PLAN), call("read_file", path="notes.txt"), answer("Done."))
    _, run_id = await _streamed(openai, "Summarise the numbers in notes.txt")
    events = await _events(http, run_id)
    kinds = [event["kind"] for event in events]
    assert kinds.index("plan") < kinds.index("tool_started")
    plan = events[kinds.index("plan")]
    assert plan["steps"] == ["Read notes.txt", "Check the numbers in it", "Write the summary"]
    assert plan["replanned"] is False
    # The model's next call saw the plan as its own todo call.
    sent = simulator.state.requests(scenario=UPSTREAM)[-2].body["messages"]
    assert any(c["function"]["name"] == "todo" for m in sent for c in m.get("tool_calls") or ())


async def test_failed_tool_calls_make_a_new_plan_that_the_client_is_told_of(
    simulator: SimulatorServer, openai: AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    script(
        simulator,
        UPSTREAM,
        answer(PLAN),
        calls(
            ("read_file", {"path": "notes.txt"}),
            ("read_file", {"path": "numbers.txt"}),
            ("list_files", {}),
        ),
        answer("1. Ask the user where the notes are\n2. Summarise what is known"),
        answer("I could not find the notes; where are they?"),
    )
    reasoning, run_id = await _streamed(openai, "Summarise the numbers in notes.txt")
    revised = reasoning[_first(reasoning, "Plan revised")]
    assert revised.startswith("Plan revised (2 of 3 tool calls since the plan failed):\n")
    assert "1. Ask the user where the notes are\n" in revised
    events = await _events(http, run_id)
    plans = [event for event in events if event["kind"] == "plan"]
    assert [(p["replanned"], p["reason"]) for p in plans] == [
        (False, None),
        (True, "2 of 3 tool calls since the plan failed"),
    ]
    metrics = await http.get("/metrics")
    assert f'hermes_plans_total{{profile="{MODEL}",replanned="true"}} 1.0' in metrics.text
