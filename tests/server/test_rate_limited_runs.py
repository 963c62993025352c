"""A run the upstream refused for its rate, as an OpenAI SDK client lives it: the 429's
``retry-after`` is waited out by the SDK's own retry, which then gets the answer; and the
429 follows the chain's last word ("wait"), also when an earlier provider failed otherwise."""

from __future__ import annotations

import httpx
import openai

from server.http.threaded import ThreadedServer
from server.simulator import Fault, SimulatorServer, Step
from tests.server.served import answer, script
from tests.server.test_upstream_faults import (  # noqa: F401 (fixtures)
    KEY,
    _plain,
    _request,
    http,
    server,
)

HI: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


async def test_the_sdks_own_retry_after_a_rate_limited_run_gets_the_answer(
    server: ThreadedServer,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    refused = Step(fault=Fault(status=429, retry_after=0.1), repeat=2)  # each provider's tries
    script(simulator, "primary", refused, answer("Here it is."))
    script(simulator, "backup", refused, answer("Here it is."))
    async with openai.AsyncOpenAI(
        api_key=KEY, base_url=server.base_url + "/v1", max_retries=1, http_client=_plain()
    ) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="fallback-agent", messages=HI
        )

    assert raw.retries_taken == 1  # the first answer was the 429, waited out
    assert raw.parse().choices[0].message.content == "Here it is."


async def test_a_chain_whose_last_provider_refused_for_its_rate_is_a_429(
    http: httpx.AsyncClient,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    # The primary is broken, the backup busy: the last word was "wait", which a retry may get
    # past (the backup's quota frees up), so the client is told to wait, not that all broke.
    script(simulator, "primary", Step(fault=Fault(status=500), repeat=5))
    script(simulator, "backup", Step(fault=Fault(status=429, retry_after=0.1), repeat=5))

    response = await http.post("/v1/chat/completions", json=_request(stream=False))

    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"


async def test_an_upstream_saying_retry_at_once_is_not_told_as_a_minute(
    http: httpx.AsyncClient,  # noqa: F811
    simulator: SimulatorServer,
) -> None:
    # "retry-after: 0" is what the upstream said, not a silence to fill with the cooldown.
    script(simulator, "primary", Step(fault=Fault(status=429, retry_after=0), repeat=5))
    script(simulator, "backup", Step(fault=Fault(status=429, retry_after=0), repeat=5))

    response = await http.post("/v1/chat/completions", json=_request(stream=False))

    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"  # the least whole second a client reads
