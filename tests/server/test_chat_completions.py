"""POST /v1/chat/completions against a real server process and the simulator upstream."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from server.http.threaded import ThreadedServer
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, KEY_BOB, UPSTREAM_MODEL

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


def script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


def lookup(word: str) -> ToolCallSpec:
    return ToolCallSpec(name="lookup", arguments={"word": word})


def _multi_tool_script(simulator: SimulatorServer) -> None:
    script(
        simulator,
        Step(reply=Reply(reasoning="Two words to check.", tool_calls=[lookup("a"), lookup("b")])),
        Step(reply=Reply(tool_calls=[lookup("c")])),
        Step(reply=Reply(text="All three words are fine.")),
    )


async def test_a_multi_tool_run_answers_with_aggregated_usage(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _multi_tool_script(simulator)
    raw = await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=HELLO
    )
    completion = raw.parse()
    choice = completion.choices[0]
    assert choice.message.content == "All three words are fine."
    assert choice.finish_reason == "stop"
    assert completion.id.startswith("chatcmpl-")
    upstream = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert len(upstream) == 3
    assert completion.usage is not None
    total_prompt = 0
    for record in upstream:
        total_prompt += len(record.body["messages"])  # grows each call: three calls were summed
    assert completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens_details is not None
    assert (completion.usage.completion_tokens_details.reasoning_tokens or 0) > 0
    extension = (completion.model_extra or {})["hermes"]
    assert extension["exit_reason"] == "completed"
    assert extension["model_calls"] == 3
    assert raw.headers["x-hermes-run-id"] == extension["run_id"]


async def test_the_upstream_streams_only_for_a_streaming_client(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    # Nobody watches a non-streaming client's answer being generated: the reply comes from
    # upstream in one piece, one body for the server to read instead of a frame per token.
    script(simulator, Step(reply=Reply(text="whole", chunk_count=5)))
    plain = await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    script(simulator, Step(reply=Reply(text="streamed", chunk_count=5)))
    stream = await client.chat.completions.create(model="hermes-agent", messages=HELLO, stream=True)
    streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert (plain.choices[0].message.content, streamed) == ("whole", "streamed")
    first, second = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert (first.body.get("stream"), second.body.get("stream")) == (None, True)


async def test_a_streamed_run_shows_reasoning_tool_lines_text_and_one_usage_chunk(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _multi_tool_script(simulator)
    stream = await client.chat.completions.create(
        model="hermes-agent",
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
    )
    reasoning, content, usage_chunks, finishes, progress = [], [], [], [], []
    async for chunk in stream:
        if chunk.usage is not None:
            usage_chunks.append(chunk.usage)
        for choice in chunk.choices:
            extra = choice.delta.model_extra or {}
            reasoning.append(extra.get("reasoning_content") or "")
            if "hermes" in extra:
                progress.append((extra["hermes"]["phase"], extra["hermes"]["name"]))
            content.append(choice.delta.content or "")
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    thinking = "".join(reasoning)
    assert thinking.startswith("Two words to check.")
    assert "→ lookup a" in thinking
    assert "✓ lookup (" in thinking
    assert "".join(content) == "All three words are fine."
    assert "lookup" not in "".join(content)  # progress never leaks into the answer
    assert progress.count(("started", "lookup")) == progress.count(("finished", "lookup")) == 3
    assert finishes == ["stop"]
    assert len(usage_chunks) == 1


async def test_the_stream_helper_reassembles_the_answer_in_strict_mode(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    _multi_tool_script(simulator)
    async with client.chat.completions.stream(model="hermes-agent", messages=HELLO) as stream:
        completion = await stream.get_final_completion()
    assert completion.choices[0].message.content == "All three words are fine."
    assert completion.choices[0].finish_reason == "stop"


async def test_sse_frames_are_plain_data_lines_ending_with_done(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    script(simulator, Step(reply=Reply(text="Hi.")))
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {KEY_ALICE}"},
            json={"model": "hermes-agent", "messages": HELLO, "stream": True},
        )
    body = response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "\r" not in body
    assert "event:" not in body
    assert "\nid:" not in body
    frames = [frame for frame in body.split("\n\n") if frame and not frame.startswith(":")]
    assert all(frame.startswith("data: ") for frame in frames)
    assert frames[-1] == "data: [DONE]"


async def test_a_client_declared_tool_round_trips_through_the_client(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    browser_call = ToolCallSpec(name="open_page", arguments={"url": "https://example.org"})
    script(
        simulator,
        Step(reply=Reply(tool_calls=[lookup("x"), browser_call])),
        Step(reply=Reply(text="The page says hello.")),
    )
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": "open_page",
                "parameters": {"type": "object", "properties": {"url": {"type": "string"}}},
            },
        }
    ]
    first = await client.chat.completions.create(model="hermes-agent", messages=HELLO, tools=tools)
    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["open_page"]  # type: ignore[union-attr]
    assert (first.model_extra or {})["hermes"]["exit_reason"] == "awaiting_client_tools"
    history: Any = [
        *HELLO,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0].id, "content": "<h1>hello</h1>"},
    ]
    second = await client.chat.completions.create(
        model="hermes-agent", messages=history, tools=tools
    )
    assert second.choices[0].message.content == "The page says hello."
    assert "<h1>hello</h1>" in json.dumps(simulator.state.requests()[-1].body)


async def test_a_client_tool_named_like_a_server_tool_is_a_400(client: openai.AsyncOpenAI) -> None:
    tools: Any = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="hermes-agent", messages=HELLO, tools=tools)
    assert caught.value.param == "tools"


def _slow_answer(simulator: SimulatorServer) -> None:
    reply = Reply(text="slow " * 40, chunk_count=40)
    script(simulator, Step(reply=reply, fault=Fault(chunk_delay=0.25)))


async def _upstream_disconnected(simulator: SimulatorServer) -> bool:
    return await asyncio.to_thread(
        simulator.state.wait_for,
        lambda reqs: any(r.outcome == "disconnected" for r in reqs),
        5.0,
    )


async def test_stop_endpoint_interrupts_the_run_and_closes_the_upstream(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    _slow_answer(simulator)
    stream = await client.chat.completions.create(model="hermes-agent", messages=HELLO, stream=True)
    started = time.monotonic()
    finishes: list[str] = []
    extension: dict[str, Any] = {}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content and not finishes:
                stop = await http.post(
                    f"/v1/runs/{chunk.id}/stop", headers={"authorization": f"Bearer {KEY_ALICE}"}
                )
                assert stop.status_code == 202
                finishes.append("requested")
            if chunk.choices and chunk.choices[0].finish_reason:
                finishes.append(chunk.choices[0].finish_reason)
                extension = (chunk.model_extra or {})["hermes"]
        again = await http.post(
            f"/v1/runs/{extension['run_id']}/stop",
            headers={"authorization": f"Bearer {KEY_ALICE}"},
        )
    assert time.monotonic() - started < 5
    assert finishes == ["requested", "length"]
    assert extension["exit_reason"] == "interrupted"
    assert again.status_code == 409
    assert await _upstream_disconnected(simulator)


async def test_a_client_disconnect_interrupts_the_run(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    _slow_answer(simulator)
    stream = await client.chat.completions.create(model="hermes-agent", messages=HELLO, stream=True)
    run_id = stream.response.headers["x-hermes-run-id"]
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    await stream.close()
    assert await _upstream_disconnected(simulator)
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        for _ in range(50):
            run = (
                await http.get(
                    f"/v1/runs/{run_id}", headers={"authorization": f"Bearer {KEY_ALICE}"}
                )
            ).json()
            if run["status"] == "interrupted":
                break
            await asyncio.sleep(0.1)
    assert run["status"] == "interrupted"
    assert run["exit_reason"] == "interrupted"


async def test_another_key_cannot_see_or_stop_a_run(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    script(simulator, Step(reply=Reply(text="mine")))
    raw = await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=HELLO
    )
    run_id = raw.headers["x-hermes-run-id"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        as_bob = {"authorization": f"Bearer {KEY_BOB}"}
        as_alice = {"authorization": f"Bearer {KEY_ALICE}"}
        assert (await http.get(f"/v1/runs/{run_id}", headers=as_bob)).status_code == 404
        assert (await http.post(f"/v1/runs/{run_id}/stop", headers=as_bob)).status_code == 404
        assert (await http.get(f"/v1/runs/{run_id}/events", headers=as_bob)).status_code == 404
        mine = await http.get(f"/v1/runs/{run_id}", headers=as_alice)
    assert mine.json()["status"] == "completed"


async def test_run_events_replay_from_a_sequence_number(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    _multi_tool_script(simulator)
    raw = await client.chat.completions.with_raw_response.create(
        model="hermes-agent", messages=HELLO
    )
    run_id = raw.headers["x-hermes-run-id"]
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        headers = {"authorization": f"Bearer {KEY_ALICE}"}
        everything = (await http.get(f"/v1/runs/{run_id}/events", headers=headers)).text
        tail = (await http.get(f"/v1/runs/{run_id}/events?after=5", headers=headers)).text
    frames = [f for f in everything.split("\n\n") if f.startswith("id:")]
    seqs = [int(f.split("\n")[0][4:]) for f in frames]
    assert seqs == list(range(len(seqs)))
    assert "event: run_finished" in frames[-1]
    tail_seqs = [int(f.split("\n")[0][4:]) for f in tail.split("\n\n") if f.startswith("id:")]
    assert tail_seqs == seqs[6:]


async def test_a_failed_run_without_text_is_a_502(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, Step(fault=Fault(status=500, message="upstream broke")))
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    assert caught.value.status_code == 502
    assert "upstream broke" in caught.value.message


async def test_a_failure_mid_stream_arrives_as_an_error_frame(
    simulator: SimulatorServer, client: openai.AsyncOpenAI
) -> None:
    script(simulator, Step(fault=Fault(status=500, message="upstream broke")))
    stream = await client.chat.completions.create(model="hermes-agent", messages=HELLO, stream=True)
    with pytest.raises(openai.APIError) as caught:
        async for _ in stream:
            pass
    assert "upstream broke" in caught.value.message


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_a_failed_run_reads_the_same_streamed_or_not(
    simulator: SimulatorServer, hermes: ThreadedServer, path: str
) -> None:
    broken = Step(fault=Fault(status=500, message="upstream broke"))
    script(simulator, broken, broken)
    chat = path.endswith("completions")
    body: dict[str, Any] = (
        {"model": "hermes-agent", "messages": HELLO}
        if chat
        else {"model": "hermes-agent", "input": "hi"}
    )
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        auth = {"authorization": f"Bearer {KEY_ALICE}"}
        waited = await http.post(path, headers=auth, json=body)
        streamed = await http.post(path, headers=auth, json={**body, "stream": True})
    assert waited.status_code == 502
    frames = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    told = next(frame["error"] for frame in frames if "error" in frame)
    assert told == waited.json()["error"]
    assert told["type"] == told["code"] == "server_error"
    assert "upstream broke" in told["message"]


async def test_a_quiet_stream_gets_keepalive_comments_while_tools_run(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    script(
        simulator,
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="wait", arguments={"seconds": 0.7})])),
        Step(reply=Reply(text="Rested.")),
    )
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {KEY_ALICE}"},
            json={"model": "hermes-agent", "messages": HELLO, "stream": True},
        )
    assert ": keep-alive\n\n" in response.text
    assert response.text.endswith("data: [DONE]\n\n")


async def test_memory_written_in_one_request_is_there_for_the_next_one(
    simulator: SimulatorServer, client: openai.AsyncOpenAI, hermes: ThreadedServer
) -> None:
    note = ToolCallSpec(
        name="memory", arguments={"action": "add", "target": "user", "content": "Likes tea."}
    )
    script(
        simulator,
        Step(reply=Reply(tool_calls=[note])),
        Step(reply=Reply(text="Noted.")),
        Step(reply=Reply(text="Hello again.")),
    )
    await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    await client.chat.completions.create(model="hermes-agent", messages=HELLO)
    third_prompt = simulator.state.requests(scenario=UPSTREAM_MODEL)[2].body["messages"][0]
    assert "Likes tea." in third_prompt["content"]


@pytest.mark.parametrize("stream", [False, True])
async def test_text_of_several_steps_reads_as_paragraphs_streamed_or_not(
    client: openai.AsyncOpenAI, simulator: SimulatorServer, stream: bool
) -> None:
    script(
        simulator,
        Step(reply=Reply(text="Let me check.", tool_calls=[lookup("fox")])),
        Step(reply=Reply(text="Found it.")),
    )
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "fox?"}]

    if stream:
        chunks = await client.chat.completions.create(
            model="hermes-agent", messages=messages, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
    else:
        completion = await client.chat.completions.create(model="hermes-agent", messages=messages)
        text = completion.choices[0].message.content or ""

    assert text == "Let me check.\n\nFound it."


async def test_a_local_models_think_block_is_reasoning_not_answer(
    client: openai.AsyncOpenAI, simulator: SimulatorServer
) -> None:
    script(
        simulator, Step(reply=Reply(text="<think>Plan the reply.</think>\n\nHi!", chunk_count=6))
    )

    chunks = await client.chat.completions.create(
        model="hermes-agent", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    content, reasoning = [], []
    async for chunk in chunks:
        if chunk.choices:
            delta = chunk.choices[0].delta
            content.append(delta.content or "")
            reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")

    assert "".join(content) == "Hi!"
    assert "Plan the reply." in "".join(reasoning)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_grace_reply_calling_a_tool_answers_that_the_budget_ran_out(
    client: openai.AsyncOpenAI, simulator: SimulatorServer, stream: bool
) -> None:
    # Six steps use the profile's budget; the grace call, offered no tools, calls one anyway.
    script(
        simulator,
        Step(reply=Reply(tool_calls=[lookup("fox")]), repeat=6),
        Step(reply=Reply(tool_calls=[lookup("hen")])),
    )
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "look it all up"}]

    if stream:
        chunks = await client.chat.completions.create(
            model="hermes-agent", messages=messages, stream=True
        )
        seen = [c async for c in chunks if c.choices]
        text = "".join(c.choices[0].delta.content or "" for c in seen)
        finish = seen[-1].choices[0].finish_reason
    else:
        completion = await client.chat.completions.create(model="hermes-agent", messages=messages)
        text = completion.choices[0].message.content or ""
        finish = completion.choices[0].finish_reason

    assert text == (
        "The agent reached its step budget before finishing; it still wanted to call `lookup`."
    )
    assert finish == "length"  # never a clean "stop"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 7
