"""Structured outputs as the official SDK's helpers use them, in strict validation mode:
``chat.completions.parse`` / ``stream`` with a pydantic model, ``responses.parse`` with
``text_format``; after a server tool ran; repaired once; refused honestly; bad formats a 400."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
from pydantic import BaseModel

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL


class Weather(BaseModel):
    city: str
    celsius: float
    tags: list[str]


def _script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def _upstream_bodies(simulator: SimulatorServer) -> list[dict[str, Any]]:
    return [r.body for r in simulator.state.requests()]


async def test_chat_parse_returns_the_parsed_model(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    completion = await client.chat.completions.parse(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        response_format=Weather,
    )

    message = completion.choices[0].message
    assert isinstance(message.parsed, Weather)
    assert completion.choices[0].finish_reason == "stop"
    (upstream,) = _upstream_bodies(simulator)
    assert upstream["response_format"]["type"] == "json_schema"
    assert upstream["response_format"]["json_schema"]["name"] == "Weather"
    assert upstream["response_format"]["json_schema"]["strict"] is True


async def test_a_structured_answer_comes_after_a_server_tool_ran(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    _script(
        simulator,
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "fog"})])),
        Step(reply=Reply(text='{"city": "Oslo", "celsius": 4.5, "tags": ["fog"]}')),
    )

    completion = await client.chat.completions.parse(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Weather?"}],
        response_format=Weather,
    )

    assert completion.choices[0].message.parsed == Weather(city="Oslo", celsius=4.5, tags=["fog"])
    tool_turns = [m for m in _upstream_bodies(simulator)[1]["messages"] if m["role"] == "tool"]
    assert "definition of fog" in tool_turns[0]["content"]


async def test_a_streamed_structured_answer_arrives_whole_and_parses(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    async with client.chat.completions.stream(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Weather?"}],
        response_format=Weather,
    ) as stream:
        contents = [e.delta async for e in stream if e.type == "content.delta" and e.delta]
        final = await stream.get_final_completion()

    assert len(contents) == 1, "the answer was shown before it was checked"
    assert isinstance(final.choices[0].message.parsed, Weather)


async def test_an_answer_off_the_schema_is_repaired_once(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    _script(
        simulator,
        Step(reply=Reply(text='{"city": "Oslo"}')),
        Step(reply=Reply(text='{"city": "Oslo", "celsius": 2, "tags": []}')),
    )

    completion = await client.chat.completions.parse(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Weather?"}],
        response_format=Weather,
    )

    assert completion.choices[0].message.parsed == Weather(city="Oslo", celsius=2, tags=[])
    repair = _upstream_bodies(simulator)[1]["messages"][-1]
    assert repair["role"] == "user"
    assert "'celsius' is a required property" in repair["content"]


async def test_two_answers_off_the_schema_fail_the_run_instead_of_answering(
    hermes: ThreadedServer, simulator: SimulatorServer
) -> None:
    _script(simulator, Step(reply=Reply(text="It is cold."), repeat=2))
    schema = Weather.model_json_schema()
    body = {
        "model": "hermes-agent",
        "messages": [{"role": "user", "content": "Weather?"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "W", "schema": schema}},
    }
    async with httpx.AsyncClient(
        verify=TLS_UNUSED,
        base_url=hermes.base_url,
        headers={"authorization": f"Bearer {KEY_ALICE}"},
    ) as http:
        response = await http.post("/v1/chat/completions", json=body)

    assert response.status_code == 502
    assert "did not have the requested shape" in response.json()["error"]["message"]


async def test_responses_parse_returns_the_parsed_model(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    response = await client.responses.parse(
        model="hermes-agent", input="Weather in Oslo?", text_format=Weather
    )

    assert isinstance(response.output_parsed, Weather)
    assert response.text is not None
    assert response.text.format is not None
    assert response.text.format.type == "json_schema"
    (upstream,) = _upstream_bodies(simulator)
    assert upstream["response_format"]["json_schema"]["name"] == "Weather"


async def test_json_object_mode_answers_a_json_object(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    completion = await client.chat.completions.create(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Any JSON please."}],
        response_format={"type": "json_object"},
    )

    assert isinstance(json.loads(completion.choices[0].message.content or ""), dict)


async def test_a_bad_format_is_a_400_naming_the_parameter(hermes: ThreadedServer) -> None:
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    bad_chat = [
        {"type": "xml"},
        {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}},
        {"type": "json_schema", "json_schema": {"name": "w"}},
        {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "nonsense"}}},
    ]
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=headers
    ) as http:
        for response_format in bad_chat:
            response = await http.post(
                "/v1/chat/completions",
                json={
                    "model": "hermes-agent",
                    "messages": [{"role": "user", "content": "x"}],
                    "response_format": response_format,
                },
            )
            assert response.status_code == 400, response_format
            assert response.json()["error"]["param"] == "response_format"
        bad_text = await http.post(
            "/v1/responses",
            json={"model": "hermes-agent", "input": "x", "text": {"format": {"type": "yaml"}}},
        )
        assert bad_text.status_code == 400
        assert bad_text.json()["error"]["param"] == "text.format"


async def test_a_refusal_comes_back_in_the_standard_refusal_field(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    _script(
        simulator,
        Step(reply=Reply(refusal="I can't help with that.")),
        Step(reply=Reply(refusal="I can't help with that.")),
    )

    completion = await client.chat.completions.parse(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Weather?"}],
        response_format=Weather,
    )
    async with client.chat.completions.stream(
        model="hermes-agent",
        messages=[{"role": "user", "content": "Weather?"}],
        response_format=Weather,
    ) as stream:
        async for _ in stream:
            pass
        streamed = await stream.get_final_completion()

    for answer in (completion, streamed):
        message = answer.choices[0].message
        assert message.refusal == "I can't help with that."
        assert message.parsed is None
        assert answer.choices[0].finish_reason == "stop"


async def test_a_refusal_on_responses_is_a_refusal_content_part(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    _script(simulator, Step(reply=Reply(refusal="No.")))

    response = await client.responses.create(model="hermes-agent", input="Weather?")

    (message,) = [item for item in response.output if item.type == "message"]
    assert [(part.type, getattr(part, "refusal", None)) for part in message.content] == [
        ("refusal", "No.")
    ]
    assert response.status == "completed"
