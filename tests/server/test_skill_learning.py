"""Learning from runs (``learning.extract_skills``) on a real ``serve`` process: a completed run
with enough tool calls leaves a draft skill in its key's library, listed by ``/v1/skills`` as a
draft and offered to no run until approved; once approved, a new session lists it."""

from __future__ import annotations

import json
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
    http_client,
    script,
    sdk_client,
    serving,
    simulated_provider,
    system_prompt,
    until,
)

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "learning-upstream"
KEY = "sk-learning-alice-0123456789"
MODEL = "learning-agent"
PROPOSAL = {
    "name": "release-notes",
    "description": "Write release notes into NOTES.md. Use when asked for release notes.",
    "body": "1. Collect the changes.\n2. write_file NOTES.md with one line per change.",
}

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
    learning: {{extract_skills: true, min_tool_calls: 2}}
"""


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("learning")
    provider = simulated_provider(_simulator_server, UPSTREAM)
    with serving(data, CONFIG.format(data=data, key=KEY, provider=provider, model=MODEL)) as server:
        yield server


@pytest.fixture
async def alice(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY) as client:
        yield client


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, KEY) as client:
        yield client


async def _chat(alice: AsyncOpenAI, text: str, session: str) -> str:
    completion = await alice.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        extra_headers={"x-hermes-session-id": session},
    )
    return completion.choices[0].message.content or ""


async def test_a_run_with_enough_tool_calls_leaves_a_draft_offered_once_approved(
    served: Served, simulator: SimulatorServer, alice: AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    script(
        simulator,
        UPSTREAM,
        call("write_file", path="NOTES.md", content="- faster starts\n"),
        call("read_file", path="NOTES.md"),
        answer("Release notes written."),
        answer(json.dumps(PROPOSAL)),  # the extraction call, after the run
        answer("Hello."),
        answer("Hello again."),
    )
    assert await _chat(alice, "Write the release notes.", "notes") == "Release notes written."

    kept: list[dict[str, Any]] = []

    async def drafted() -> bool:
        listed = (await http.get("/v1/skills")).json()["data"]
        kept[:] = [skill for skill in listed if skill.get("draft")]
        return bool(kept)

    assert await until(drafted, server=served, seconds=60), "no draft skill was kept"
    assert [(d["name"], d["origin"]) for d in kept] == [("release-notes", "agent")]
    await _chat(alice, "Hi.", "before-approval")
    assert "release-notes" not in system_prompt(simulator, UPSTREAM)

    approved = await http.post(f"/v1/skills/{kept[0]['id']}/approve")
    assert approved.status_code == 200
    await _chat(alice, "Hi again.", "after-approval")
    assert f"- release-notes: {PROPOSAL['description']}" in system_prompt(simulator, UPSTREAM)
    metrics = (await http.get("/metrics")).text
    assert 'hermes_skills_created_total{origin="extracted",profile="learning-agent"} 1.0' in metrics


async def test_a_run_with_too_few_tool_calls_is_not_read(
    served: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    script(
        simulator,
        UPSTREAM,
        call("read_file", path="missing.md"),
        answer("Nothing there."),
        answer("Next."),
    )
    await _chat(alice, "Read the notes.", "short")

    # An extraction would have taken the next scripted reply (it starts as the run ends).
    assert await _chat(alice, "And now?", "short-2") == "Next."
    assert len(simulator.state.requests(scenario=UPSTREAM)) == 3


async def test_the_call_that_proposes_a_skill_is_counted_in_the_keys_usage(
    served: Served, simulator: SimulatorServer, alice: AsyncOpenAI, http: httpx.AsyncClient
) -> None:
    async def calls() -> int:
        answered = await http.get("/v1/usage", params={"group_by": ""})
        return int(answered.json()["totals"]["calls"])

    before = await calls()
    proposal = {**PROPOSAL, "name": "counted-notes"}
    script(
        simulator,
        UPSTREAM,
        call("write_file", path="COUNTED.md", content="- one\n"),
        call("read_file", path="COUNTED.md"),
        answer("Written."),
        answer(json.dumps(proposal)),  # the extraction call: paid for like the run's own
    )
    await _chat(alice, "Write the counted notes.", "counted")

    async def counted() -> bool:
        return await calls() == before + 4

    assert await until(counted, server=served, seconds=60), (
        f"usage counts {await calls() - before} calls of the 4 made (3 for the run, 1 to learn)"
    )
