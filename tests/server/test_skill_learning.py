"""Learning from runs (``learning.extract_skills``) on a real ``serve`` process: a completed run
with enough tool calls leaves a draft skill in its key's library, listed by ``/v1/skills`` as a
draft and offered to no run until approved; once approved, a new session lists it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import answer, call, http_client, pid_alive, sdk_client, until

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
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
    tools: [files]
    learning: {{extract_skills: true, min_tool_calls: 2}}
"""


@dataclass(frozen=True, slots=True)
class Served:
    base_url: str
    pid: int
    log: Path

    def alive(self) -> bool:
        return pid_alive(self.pid)


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("learning")
    config = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            model=MODEL,
        )
    )
    port, log = free_port(), data / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
        yield Served(f"http://127.0.0.1:{port}", process.pid, log)


@pytest.fixture
async def alice(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY) as client:
        yield client


@pytest.fixture
async def http(served: Served) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(served.base_url, KEY) as client:
        yield client


def _script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


def _system_prompt(simulator: SimulatorServer) -> str:
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=UPSTREAM)[-1].body[
        "messages"
    ]
    return str(messages[0]["content"])


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
    _script(
        simulator,
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
    assert "release-notes" not in _system_prompt(simulator)

    approved = await http.post(f"/v1/skills/{kept[0]['id']}/approve")
    assert approved.status_code == 200
    await _chat(alice, "Hi again.", "after-approval")
    assert f"- release-notes: {PROPOSAL['description']}" in _system_prompt(simulator)
    metrics = (await http.get("/metrics")).text
    assert 'hermes_skills_created_total{origin="extracted",profile="learning-agent"} 1.0' in metrics


async def test_a_run_with_too_few_tool_calls_is_not_read(
    served: Served, simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    _script(
        simulator,
        call("read_file", path="missing.md"),
        answer("Nothing there."),
        answer("Next."),
    )
    await _chat(alice, "Read the notes.", "short")

    # An extraction would have taken the next scripted reply (it starts as the run ends).
    assert await _chat(alice, "And now?", "short-2") == "Next."
    assert len(simulator.state.requests(scenario=UPSTREAM)) == 3
