"""Episodic memory (``memory.inject_episodes``) against a real ``serve`` process: a new session
starts with what the key's earlier sessions say about its first message, recorded in the
session; another key's sessions are never recalled, and a profile without the setting recalls
nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import answer, sdk_client

pytestmark = pytest.mark.slow  # starts a server process (make fast leaves it out)

UPSTREAM = "episodes-upstream"
KEY, KEY_BOB = "sk-episodes-alice-0123456789", "sk-episodes-bob-0123456789"
RECALLING, FORGETFUL = "recalling-agent", "forgetful-agent"

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: alice}}
    - {{key: {key_bob}, principal: bob}}
providers:
  - name: sim
    model: {upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {recalling}
    providers: [sim]
    memory: {{inject_episodes: 2}}
  - id: {forgetful}
    providers: [sim]
"""


@dataclass(frozen=True, slots=True)
class Served:
    base_url: str


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("episodes")
    config = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            key_bob=KEY_BOB,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            recalling=RECALLING,
            forgetful=FORGETFUL,
        )
    )
    port = free_port()
    with hermes_command("serve", "--config", str(config), port=port, log=data / "server.log"):
        yield Served(f"http://127.0.0.1:{port}")


@pytest.fixture
async def alice(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY) as client:
        yield client


@pytest.fixture
async def bob(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY_BOB) as client:
        yield client


def _script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


async def _say(client: AsyncOpenAI, model: str, text: str, session: str) -> str:
    completion = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        extra_headers={"x-hermes-session-id": session},
    )
    return completion.choices[0].message.content or ""


def _last_prompt(simulator: SimulatorServer) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=UPSTREAM)[-1].body[
        "messages"
    ]
    return messages


async def test_a_new_session_starts_with_a_fact_from_an_earlier_one(
    simulator: SimulatorServer, alice: AsyncOpenAI, tmp_path: Path
) -> None:
    _script(simulator, answer("Noted: BLUEBIRD."), answer("It is BLUEBIRD."))
    await _say(alice, RECALLING, "Our launch codename is BLUEBIRD, keep it in mind.", "brief")

    reply = await _say(alice, RECALLING, "Which codename did we pick for the launch?", "later")

    assert reply == "It is BLUEBIRD."
    prompt = json.dumps(_last_prompt(simulator))
    assert "BLUEBIRD" in prompt, "the earlier session's fact never reached the new one"
    assert "Recalled from your earlier conversations" in prompt


async def test_the_recalled_note_stays_in_the_session_for_its_next_turn(
    simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    _script(simulator, answer("Noted."), answer("Teal."), answer("Still teal."))
    await _say(alice, RECALLING, "The brand colour for the dashboard is teal.", "colours")
    first: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What brand colour does the dashboard use?"}
    ]
    done = await alice.chat.completions.create(
        model=RECALLING, messages=first, extra_headers={"x-hermes-session-id": "colours-2"}
    )
    turn_one = _last_prompt(simulator)
    again: list[ChatCompletionMessageParam] = [
        *first,
        {"role": "assistant", "content": done.choices[0].message.content},
        {"role": "user", "content": "Sure?"},
    ]
    await alice.chat.completions.create(
        model=RECALLING, messages=again, extra_headers={"x-hermes-session-id": "colours-2"}
    )
    turn_two = _last_prompt(simulator)

    # The second turn's prompt begins with the whole first one: the provider's cache holds.
    assert turn_two[: len(turn_one)] == turn_one
    assert "teal" in json.dumps(turn_one[1:])


async def test_another_keys_sessions_are_never_recalled(
    simulator: SimulatorServer, alice: AsyncOpenAI, bob: AsyncOpenAI
) -> None:
    _script(simulator, answer("Noted."), answer("I do not know."))
    await _say(alice, RECALLING, "My locker combination is 4471 at the gym.", "locker")

    await _say(bob, RECALLING, "What is the locker combination at the gym?", "bob-locker")

    assert "4471" not in json.dumps(_last_prompt(simulator))


async def test_a_profile_without_the_setting_recalls_nothing(
    simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    _script(simulator, answer("Noted."), answer("No idea."))
    await _say(alice, FORGETFUL, "The staging database lives on host marmot.", "hosts")

    await _say(alice, FORGETFUL, "Which host holds the staging database?", "hosts-2")

    assert "marmot" not in json.dumps(_last_prompt(simulator))
