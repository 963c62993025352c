"""Episodic memory (``memory.inject_episodes``) against a real ``serve`` process: a new session
starts with what the key's earlier sessions say about its first message, recorded in the
session; another key's sessions are never recalled, and a profile without the setting recalls
nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from server.simulator import SimulatorServer
from tests.server.served import (
    Served,
    answer,
    last_messages,
    script,
    sdk_client,
    serving,
    simulated_provider,
)

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
{provider}profiles:
  - id: {recalling}
    providers: [sim]
    memory: {{inject_episodes: 2}}
  - id: {forgetful}
    providers: [sim]
"""


@pytest.fixture(scope="module")
def served(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("episodes")
    config = CONFIG.format(
        data=data,
        key=KEY,
        key_bob=KEY_BOB,
        provider=simulated_provider(_simulator_server, UPSTREAM),
        recalling=RECALLING,
        forgetful=FORGETFUL,
    )
    with serving(data, config) as server:
        yield server


@pytest.fixture
async def alice(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY) as client:
        yield client


@pytest.fixture
async def bob(served: Served) -> AsyncIterator[AsyncOpenAI]:
    async with sdk_client(served.base_url, KEY_BOB) as client:
        yield client


async def _say(client: AsyncOpenAI, model: str, text: str, session: str) -> str:
    completion = await client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        extra_headers={"x-hermes-session-id": session},
    )
    return completion.choices[0].message.content or ""


async def test_a_new_session_starts_with_a_fact_from_an_earlier_one(
    simulator: SimulatorServer, alice: AsyncOpenAI, tmp_path: Path
) -> None:
    script(simulator, UPSTREAM, answer("Noted: BLUEBIRD."), answer("It is BLUEBIRD."))
    await _say(alice, RECALLING, "Our launch codename is BLUEBIRD, keep it in mind.", "brief")

    reply = await _say(alice, RECALLING, "Which codename did we pick for the launch?", "later")

    assert reply == "It is BLUEBIRD."
    prompt = json.dumps(last_messages(simulator, UPSTREAM))
    assert "BLUEBIRD" in prompt, "the earlier session's fact never reached the new one"
    assert "Recalled from your earlier conversations" in prompt


async def test_the_recalled_note_stays_in_the_session_for_its_next_turn(
    simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer("Noted."), answer("Teal."), answer("Still teal."))
    await _say(alice, RECALLING, "The brand colour for the dashboard is teal.", "colours")
    first: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What brand colour does the dashboard use?"}
    ]
    done = await alice.chat.completions.create(
        model=RECALLING, messages=first, extra_headers={"x-hermes-session-id": "colours-2"}
    )
    turn_one = last_messages(simulator, UPSTREAM)
    again: list[ChatCompletionMessageParam] = [
        *first,
        {"role": "assistant", "content": done.choices[0].message.content},
        {"role": "user", "content": "Sure?"},
    ]
    await alice.chat.completions.create(
        model=RECALLING, messages=again, extra_headers={"x-hermes-session-id": "colours-2"}
    )
    turn_two = last_messages(simulator, UPSTREAM)

    # The second turn's prompt begins with the whole first one: the provider's cache holds.
    assert turn_two[: len(turn_one)] == turn_one
    assert "teal" in json.dumps(turn_one[1:])


async def test_another_keys_sessions_are_never_recalled(
    simulator: SimulatorServer, alice: AsyncOpenAI, bob: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer("Noted."), answer("I do not know."))
    await _say(alice, RECALLING, "My locker combination is 4471 at the gym.", "locker")

    await _say(bob, RECALLING, "What is the locker combination at the gym?", "bob-locker")

    assert "4471" not in json.dumps(last_messages(simulator, UPSTREAM))


async def test_a_profile_without_the_setting_recalls_nothing(
    simulator: SimulatorServer, alice: AsyncOpenAI
) -> None:
    script(simulator, UPSTREAM, answer("Noted."), answer("No idea."))
    await _say(alice, FORGETFUL, "The staging database lives on host marmot.", "hosts")

    await _say(alice, FORGETFUL, "Which host holds the staging database?", "hosts-2")

    assert "marmot" not in json.dumps(last_messages(simulator, UPSTREAM))
