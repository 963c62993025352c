"""A ``previous_response_id`` chain: every turn continues the stored session, so the prompt
prefix stays the same and the upstream's prompt cache serves more of each turn; and the chain
survives a restart of the server (SQLite and PostgreSQL)."""

from __future__ import annotations

import openai
import pytest

from server.app import create_app
from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services


def _server(simulator: SimulatorServer, database_url: str) -> ThreadedServer:
    services = make_services(simulator, database_url=database_url, migrate_on_start=True)
    return ThreadedServer(create_app(services))


async def _turn(
    server: ThreadedServer, number: int, previous: str | None
) -> openai.types.responses.Response:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=server.base_url + "/v1",
        api_key=KEY_ALICE,
        _strict_response_validation=True,
    ) as sdk:
        return await sdk.responses.create(
            model="hermes-agent",
            input=f"Look up word number {number} and tell me about it.",
            previous_response_id=previous,
        )


async def test_a_five_turn_chain_reads_more_from_the_cache_each_turn_and_survives_a_restart(
    simulator: SimulatorServer, database_url: str
) -> None:
    steps = []
    for number in range(5):
        lookup = ToolCallSpec(name="lookup", arguments={"word": f"w{number}"})
        steps += [Step(reply=Reply(tool_calls=[lookup])), Step(reply=Reply(text=f"Word {number}."))]
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=steps))
    cached: list[int] = []
    previous: str | None = None
    with _server(simulator, database_url) as server:
        for number in range(4):
            response = await _turn(server, number, previous)
            assert response.output_text == f"Word {number}."
            assert response.usage is not None
            cached.append(response.usage.input_tokens_details.cached_tokens)
            previous = response.id
    with _server(simulator, database_url) as restarted:
        last = await _turn(restarted, 4, previous)
    assert last.output_text == "Word 4."
    assert last.usage is not None
    cached.append(last.usage.input_tokens_details.cached_tokens)
    assert cached == sorted(cached)
    assert len(set(cached)) == 5, cached  # strictly more every turn
    # The fifth turn's prompt still holds the first turn's hidden tool call.
    sent = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert any("definition of w0" in str(m.get("content")) for m in sent)


async def test_stored_responses_beyond_the_retention_limit_are_pruned_at_start(
    simulator: SimulatorServer, database_url: str
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="ok."), repeat=3)])
    )
    with _server(simulator, database_url) as server:
        ids = [(await _turn(server, number, None)).id for number in range(3)]
    services = make_services(
        simulator, database_url=database_url, migrate_on_start=True, responses_max_count=1
    )
    with ThreadedServer(create_app(services)) as restarted:
        async with openai.AsyncOpenAI(
            http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
            base_url=restarted.base_url + "/v1",
            api_key=KEY_ALICE,
        ) as sdk:
            for old in ids[:2]:
                with pytest.raises(openai.NotFoundError):
                    await sdk.responses.retrieve(old)
            assert (await sdk.responses.retrieve(ids[2])).output_text == "ok."
