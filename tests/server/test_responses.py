"""POST /v1/responses and its companions, driven by the official SDK (strict) against a real
server process and the simulator upstream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from server.http.threaded import ThreadedServer
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL

WEATHER_TOOL: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": None,
}


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def call(name: str, **arguments: Any) -> ToolCallSpec:
    return ToolCallSpec(name=name, arguments=arguments)


def tools(*calls: ToolCallSpec) -> Step:
    return Step(reply=Reply(tool_calls=list(calls)))


def text(reply: str) -> Step:
    return Step(reply=Reply(text=reply))


def upstream_messages(simulator: SimulatorServer) -> list[list[dict[str, Any]]]:
    return [r.body["messages"] for r in simulator.state.requests(scenario=UPSTREAM_MODEL)]


async def test_server_tools_show_as_reasoning_items_never_as_function_calls(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, tools(call("lookup", word="zebra")), text("Zebras are fine."))
    response = await client.responses.create(model="hermes-agent", input="check zebra")
    assert response.status == "completed"
    assert response.output_text == "Zebras are fine."
    kinds = [item.type for item in response.output]
    assert "function_call" not in kinds
    assert kinds[-1] == "message"
    reasoning = [item for item in response.output if item.type == "reasoning"]
    lines = "".join(part.text for item in reasoning for part in item.summary)
    assert "lookup" in lines
    assert response.usage is not None
    assert response.usage.input_tokens > 0
    assert response.usage.input_tokens_details.cached_tokens is not None
    assert isinstance(response.created_at, (int, float))


async def test_a_stream_follows_the_canonical_order(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, tools(call("lookup", word="a")), text("Done."))
    stream = await client.responses.create(model="hermes-agent", input="go", stream=True)
    events = [event async for event in stream]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created"
    assert events[1].type == "response.in_progress"
    assert events[-1].type == "response.completed"
    terminal = [e for e in events if e.type in ("response.completed", "response.failed")]
    assert len(terminal) == 1
    text_deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text_deltas == "Done."


async def test_the_stream_helper_gives_the_final_response(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, text("Hello there."))
    async with client.responses.stream(model="hermes-agent", input="hi") as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.output_text == "Hello there."


async def test_a_client_function_tool_round_trip(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, tools(call("get_weather", city="Paris")), text("It is 21 °C in Paris."))
    first = await client.responses.create(
        model="hermes-agent", input="weather in Paris?", tools=[WEATHER_TOOL]
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    assert first.status == "completed"
    assert first.tools[0].type == "function"
    second = await client.responses.create(
        model="hermes-agent",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": calls[0].call_id, "output": "21 °C"}],
        tools=[WEATHER_TOOL],
    )
    assert second.output_text == "It is 21 °C in Paris."
    sent = upstream_messages(simulator)[-1]
    assert sent[-1] == {"role": "tool", "tool_call_id": calls[0].call_id, "content": "21 °C"}


async def test_previous_response_id_continues_the_hidden_tool_history(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, tools(call("lookup", word="okapi")), text("Okapis are fine."), text("Yes."))
    first = await client.responses.create(model="hermes-agent", input="check okapi")
    second = await client.responses.create(
        model="hermes-agent", previous_response_id=first.id, input="sure?"
    )
    hermes = (second.model_extra or {})["hermes"]
    assert hermes["session_id"] == (first.model_extra or {})["hermes"]["session_id"]
    assert hermes["exit_reason"] == "completed"
    roles = [m["role"] for m in upstream_messages(simulator)[-1] if m["role"] != "system"]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


async def test_an_unknown_previous_response_is_a_400_as_on_openai(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(
            model="hermes-agent", previous_response_id="resp_nope", input="hi"
        )
    assert (caught.value.code, caught.value.param) == (
        "previous_response_not_found",
        "previous_response_id",
    )
    assert caught.value.type == "invalid_request_error"


async def test_retrieve_list_input_items_and_delete(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, text("Stored."))
    created = await client.responses.create(
        model="hermes-agent", input="keep this", metadata={"purpose": "test"}
    )
    fetched = await client.responses.retrieve(created.id)
    assert (fetched.id, fetched.output_text, fetched.metadata) == (
        created.id,
        "Stored.",
        {"purpose": "test"},
    )
    items = await client.responses.input_items.list(created.id)
    assert [item.type for item in items.data] == ["message"]
    await client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(created.id)


async def test_another_key_cannot_see_a_response(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    script(simulator, text("Mine."))
    created = await client.responses.create(model="hermes-agent", input="private")
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key=KEY_BOB,
        max_retries=0,
    ) as bob:
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve(created.id)
        with pytest.raises(openai.BadRequestError):
            await bob.responses.create(
                model="hermes-agent", previous_response_id=created.id, input="hi"
            )


async def test_store_false_keeps_nothing(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, text("Gone."))
    created = await client.responses.create(model="hermes-agent", input="hi", store=False)
    assert created.output_text == "Gone."
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(created.id)


async def test_the_upstream_streams_unless_nobody_can_watch_the_response(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # A plain response is answered once it is complete: its replies come in one piece. A
    # streamed one, or a background one (it may be streamed later), is streamed from upstream.
    script(simulator, Step(reply=Reply(text="done"), repeat=3))
    plain = await client.responses.create(model="hermes-agent", input="a")
    streamed = [
        e async for e in await client.responses.create(model="hermes-agent", input="b", stream=True)
    ]
    background = await client.responses.create(model="hermes-agent", input="c", background=True)
    for _ in range(50):
        if (await client.responses.retrieve(background.id)).status == "completed":
            break
        await asyncio.sleep(0.05)
    assert plain.output_text == "done"
    assert streamed[-1].type == "response.completed"
    sent = [r.body.get("stream") for r in simulator.state.requests(scenario=UPSTREAM_MODEL)]
    assert sent == [None, True, True]


async def test_a_background_response_can_be_polled_and_cancelled(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, tools(call("hold")), text("never"))
    started = await client.responses.create(model="hermes-agent", input="slow", background=True)
    assert started.status in ("queued", "in_progress")
    polled = await client.responses.retrieve(started.id)
    assert polled.status == "in_progress"
    cancelled = await client.responses.cancel(started.id)
    assert cancelled.status == "cancelled"
    assert (await client.responses.retrieve(started.id)).status == "cancelled"


async def test_a_dropped_stream_resumes_from_its_sequence_number(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(
        simulator,
        tools(call("wait", seconds=0.3)),
        Step(reply=Reply(text="A long answer in many parts.", chunk_count=8)),
    )
    stream = await client.responses.create(
        model="hermes-agent", input="go", stream=True, background=True
    )
    seen = []
    async for event in stream:
        seen.append(event)
        if len(seen) == 4:
            break
    await stream.close()
    response_id = seen[0].response.id  # type: ignore[union-attr]
    resumed = await client.responses.retrieve(
        response_id, stream=True, starting_after=seen[-1].sequence_number
    )
    rest = [event async for event in resumed]
    numbers = [e.sequence_number for e in seen + rest]
    assert numbers == list(range(len(numbers)))
    assert rest[-1].type == "response.completed"


@pytest.mark.parametrize("progress", ["reasoning", "events", "openwebui"])
async def test_a_finished_response_streams_again_byte_for_byte(
    simulator: SimulatorServer, hermes: ThreadedServer, progress: str
) -> None:
    # Once final it is no longer held live: the replay is rebuilt from the store (the request
    # and how it rendered) and the run's logged events.
    script(simulator, tools(call("lookup", word="x")), text("Answered."))
    headers = {"authorization": f"Bearer {KEY_ALICE}", "x-hermes-progress": progress}
    body = {"model": "hermes-agent", "input": "go", "stream": True, "instructions": "Be brief."}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        first = await http.post("/v1/responses", headers=headers, json=body)
        opening = next(line for line in first.text.splitlines() if line.startswith("data: {"))
        response_id = json.loads(opening[6:])["response"]["id"]
        again = await http.get(f"/v1/responses/{response_id}?stream=true", headers=headers)
        tail = await http.get(
            f"/v1/responses/{response_id}?stream=true&starting_after=3", headers=headers
        )
    assert again.status_code == 200
    assert again.text == first.text
    assert tail.text.startswith("event: ")
    numbers = [json.loads(line[6:])["sequence_number"] for line in tail.text.splitlines()
               if line.startswith("data: {")]  # fmt: skip
    assert numbers[0] == 4


async def test_a_run_over_its_budget_ends_incomplete(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # The grace call after the sixth step calls a tool too: it is not run, and the answer says
    # the budget ran out (never an empty output_text).
    script(simulator, Step(reply=Reply(tool_calls=[call("lookup", word="x")]), repeat=10))
    response = await client.responses.create(model="hermes-agent", input="loop")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_messages"
    assert response.output_text == (
        "The agent reached its step budget before finishing; it still wanted to call `lookup`."
    )


async def test_a_failed_stream_ends_with_an_error_event_then_failed(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, Step(fault=Fault(status=500)))
    stream = await client.responses.create(model="hermes-agent", input="hi", stream=True)
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_compact_returns_a_compaction_item_that_can_be_fed_back(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    # Too short to need a summary: the compaction holds the conversation as it is.
    script(simulator, text("Continuing."))
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        auth = {"authorization": f"Bearer {KEY_ALICE}"}
        compacted = await http.post(
            "/v1/responses/compact",
            json={"model": "hermes-agent", "input": "a long conversation"},
            headers=auth,
        )
        assert compacted.status_code == 200, compacted.text
        body = compacted.json()
        assert body["object"] == "response.compaction"
        item = body["output"][-1]
        assert item["type"] == "compaction"
        missing = await http.post("/v1/responses/compact", json={"input": "x"}, headers=auth)
        assert missing.status_code == 400
    answer = await client.responses.create(
        model="hermes-agent", input=[item, {"role": "user", "content": "go on"}]
    )
    assert answer.output_text == "Continuing."
    sent = upstream_messages(simulator)[-1]
    # Two user turns in a row are merged before the call (role alternation).
    assert [m.get("content") for m in sent[1:]] == ["a long conversation\n\ngo on"]


async def test_compact_summarises_in_a_run_of_its_own_and_reports_its_usage(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    script(simulator, text("## Task so far\nTwelve long turns about nothing."))
    long_input = [
        {
            "role": "user" if turn % 2 == 0 else "assistant",
            "content": f"turn {turn} " + "word " * 400,
        }
        for turn in range(12)
    ]
    auth = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        compacted = await http.post(
            "/v1/responses/compact",
            json={"model": "hermes-agent", "input": long_input},
            headers=auth,
        )
        assert compacted.status_code == 200, compacted.text
        run = (
            await http.get(f"/v1/runs/{compacted.headers['x-hermes-run-id']}", headers=auth)
        ).json()
    usage = compacted.json()["usage"]
    (summarising,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert "Twelve long turns" not in str(summarising.body)  # the summary is what came back
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert (run["status"], run["usage"]["input_tokens"]) == ("completed", usage["input_tokens"])


async def test_max_tool_calls_caps_the_server_tools_and_asks_for_an_answer(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(
        simulator,
        tools(call("lookup", word="a"), call("lookup", word="b")),
        text("Answered with one lookup."),
    )
    response = await client.responses.create(
        model="hermes-agent", input="look up a and b", max_tool_calls=1, parallel_tool_calls=False
    )
    assert response.output_text == "Answered with one lookup."
    first, second = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert first.body["parallel_tool_calls"] is False
    results = [m["content"] for m in second.body["messages"] if m["role"] == "tool"]
    assert results[0].startswith("definition of a")
    assert results[1].startswith("Error: this request may make at most 1 tool call")
    assert "tools" not in second.body  # no tools left to offer: the model must answer


async def test_a_response_that_fails_after_a_tool_ran_is_a_502_like_chat(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(
                    reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "x"})])
                ),
                Step(fault=Fault(status=400, message="bad request upstream")),
            ]
        ),
    )

    with pytest.raises(openai.APIStatusError) as failed:
        await client.responses.create(model="hermes-agent", input="look it up")

    assert failed.value.status_code == 502
    assert "bad request upstream" in str(failed.value.message)


async def test_step_text_reads_as_paragraphs_and_think_blocks_are_reasoning(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    simulator.state.script(
        UPSTREAM_MODEL,
        Scenario(
            steps=[
                Step(
                    reply=Reply(
                        text="<think>Check first.</think>Let me check.",
                        tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "fox"})],
                    )
                ),
                Step(reply=Reply(text="Found it.")),
            ]
        ),
    )

    response = await client.responses.create(model="hermes-agent", input="fox?")

    assert response.output_text == "Let me check.\n\nFound it."
    reasoning = [
        part.text for item in response.output if item.type == "reasoning" for part in item.summary
    ]
    assert any("Check first." in text for text in reasoning)
