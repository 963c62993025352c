"""Open WebUI mode: native tool cards and status lines in the chat stream, cheap side tasks."""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import SecretStr

from hermes_core.providers import ProviderConfig, create_provider
from hermes_core.providers.fallback import FallbackChain
from hermes_core.providers.retry import RetryPolicy
from server.http.threaded import ThreadedServer
from server.profiles import Profile
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL

OPENWEBUI = {"authorization": f"Bearer {KEY_ALICE}", "x-openwebui-chat-id": "chat-123"}
# Open WebUI sends its built-in tools with every request.
OPENWEBUI_TOOLS = [
    {"type": "function", "function": {"name": "get_current_timestamp", "parameters": {}}},
    {"type": "function", "function": {"name": "lookup", "parameters": {}}},
]


async def _frames(hermes: ThreadedServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        response = await http.post("/v1/chat/completions", headers=OPENWEBUI, json=body)
    assert response.status_code == 200
    lines = [line for line in response.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def _script(simulator: SimulatorServer, *steps: Step) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=list(steps)))


async def test_server_tools_appear_as_tool_cards_each_with_its_output(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    calls = [ToolCallSpec(name="lookup", arguments={"word": w}) for w in ("a", "b")]
    _script(
        simulator,
        Step(reply=Reply(tool_calls=[*calls, ToolCallSpec(name="nonexistent")])),
        Step(reply=Reply(text="Done.")),
    )
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": OPENWEBUI_TOOLS,
    }
    frames = await _frames(hermes, body)
    items = [f["item"] for f in frames if f.get("type") == "response.output_item.added"]
    started = {i["call_id"]: i for i in items if i["type"] == "function_call"}
    outputs = {i["call_id"]: i for i in items if i["type"] == "function_call_output"}
    assert len(started) == 3
    assert set(outputs) == set(started)  # every card is closed, or Open WebUI would run the tool
    texts = sorted(o["output"][0]["text"] for o in outputs.values())
    assert texts[0].startswith("Error: ")  # the unknown tool shows as a failed card
    assert all(i["status"] == "completed" for i in items)
    statuses = [f["event"]["data"] for f in frames if "event" in f]
    assert statuses
    assert statuses[-1]["done"] is True
    # Open WebUI's own tools were not offered to the model.
    upstream = simulator.state.requests(scenario=UPSTREAM_MODEL)[0].body
    assert "get_current_timestamp" not in json.dumps(upstream["tools"])


async def test_an_interrupted_run_still_closes_its_tool_cards(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(
        simulator,
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="wait", arguments={"seconds": 0.3})])),
        Step(fault=Fault(status=500)),
    )
    body = {"model": "hermes-agent", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    frames = await _frames(hermes, body)
    items = [f["item"] for f in frames if f.get("type") == "response.output_item.added"]
    assert [i["type"] for i in items] == ["function_call", "function_call_output"]
    assert frames[-1].get("error") is not None  # the failure itself, after the cards closed


async def test_a_task_request_is_answered_by_one_model_call_without_tools(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Step(reply=Reply(text='{"title": "Greeting"}')))
    task = "### Task:\nGenerate a concise title for the chat.\n### Chat History:\nUSER: hi"
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        response = await http.post(
            "/v1/chat/completions",
            headers=OPENWEBUI,
            json={
                "model": "hermes-agent",
                "stream": False,
                "max_tokens": 1000,
                "messages": [{"role": "user", "content": task}],
            },
        )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == '{"title": "Greeting"}'
    # It is a run like any other: it can be stopped, and its usage is counted.
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        run = await http.get(f"/v1/runs/{response.headers['x-hermes-run-id']}", headers=OPENWEBUI)
    assert (run.json()["status"], run.json()["iterations"]) == ("completed", 1)
    assert run.json()["usage"]["input_tokens"] > 0
    assert response.json()["usage"]["prompt_tokens"] == run.json()["usage"]["input_tokens"]
    (upstream,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert "tools" not in upstream.body
    assert "stream" not in upstream.body  # nobody watches it: fetched in one piece
    assert upstream.body["messages"] == [{"role": "user", "content": task}]


async def test_a_side_task_is_not_retried_against_a_failing_upstream(
    simulator: SimulatorServer,
) -> None:
    provider = create_provider(
        ProviderConfig(
            name="sim",
            model="side-task",
            api_mode="chat_completions",
            base_url=simulator.base_url + "/v1",
            api_key=SecretStr("k"),
        )
    )
    chain = FallbackChain([provider], retry=RetryPolicy(max_attempts=3, base_delay=0.01))
    simulator.state.script(
        "side-task", Scenario(steps=[Step(fault=Fault(status=503), repeat=3), Step()])
    )
    profile = Profile(id="hermes-agent", provider=chain)
    try:
        result = await profile.plain_agent(owner="alice").run_conversation("### Task: title")
    finally:
        await provider.aclose()

    assert result["exit_reason"] == "failed"
    assert len(simulator.state.requests(scenario="side-task")) == 1
    assert chain.retry.max_attempts == 3  # the profile's own runs still retry


async def test_open_webuis_chat_id_names_the_session_on_responses_too(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(
        simulator,
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="lookup", arguments={"word": "owl"})])),
        Step(reply=Reply(text="An owl is a bird.")),
        Step(reply=Reply(text="Yes, at night.")),
    )
    headers = {**OPENWEBUI, "x-openwebui-chat-id": "chat-responses-1"}
    first_input = [{"role": "user", "content": "What is an owl?"}]
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=headers
    ) as http:
        first = await http.post(
            "/v1/responses", json={"model": "hermes-agent", "input": first_input}
        )
        second = await http.post(
            "/v1/responses",
            json={
                "model": "hermes-agent",
                "input": [
                    *first_input,
                    {"role": "assistant", "content": "An owl is a bird."},
                    {"role": "user", "content": "Does it hunt?"},
                ],
            },
        )

    assert first.headers["x-hermes-session-id"] == "chat-responses-1"
    assert second.headers["x-hermes-session-id"] == "chat-responses-1"
    # The second turn continued the stored transcript: the tool call it never saw is there.
    last = simulator.state.requests(scenario=UPSTREAM_MODEL)[-1].body["messages"]
    assert any(m["role"] == "tool" and "definition of owl" in m["content"] for m in last)


async def test_a_task_request_on_responses_is_one_model_call_without_tools(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Step(reply=Reply(text='{"title": "Owls"}')))
    task = "### Task:\nGenerate a concise title for the chat.\n### Chat History:\nUSER: owls"
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=OPENWEBUI
    ) as http:
        response = await http.post("/v1/responses", json={"model": "hermes-agent", "input": task})

    assert response.status_code == 200
    assert response.json()["output"][-1]["content"][0]["text"] == '{"title": "Owls"}'
    (sent,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert not sent.body.get("tools")
    assert "x-hermes-session-id" not in response.headers
