"""A run the upstream refused for its rate before it did anything is a refusal, as the 429
says: a retry under the same ``Idempotency-Key``, after the ``retry-after`` it was told, runs
the request (the key is given up), not a replay of the 429 for a day. A run refused for its
rate after its tools acted did work, so it is a 502 as before (kept with its key: a retry
must not act twice)."""

from __future__ import annotations

import uuid

import openai
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.server.conftest import UPSTREAM_MODEL
from tests.server.served import call

HI: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
REFUSED = Step(fault=Fault(status=429, retry_after=0.1))


async def test_a_retry_under_the_same_key_after_a_rate_limited_run_gets_the_answer(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[REFUSED, Step(reply=Reply(text="ok"))]))
    key = {"Idempotency-Key": str(uuid.uuid4())}
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="hermes-agent", messages=HI, extra_headers=key)

    retried = await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=HI, extra_headers=key
    )

    assert "idempotent-replayed" not in retried.headers
    assert retried.parse().choices[0].message.content == "ok"


async def test_a_run_refused_for_its_rate_after_its_tools_acted_is_a_502(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    steps = [call("lookup", word="tower"), REFUSED]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))

    with pytest.raises(openai.InternalServerError) as failed:
        await client.chat.completions.create(model="hermes-agent", messages=HI)

    assert failed.value.status_code == 502
