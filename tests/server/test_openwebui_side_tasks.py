"""Open WebUI's side tasks (title, tags, follow-ups: a non-streamed ``### Task:`` prompt) are
one plain model call that runs no tool; and a turn whose message is Open WebUI's RAG template,
which starts with ``### Task:`` too, is a turn of the conversation, not a side task."""

from __future__ import annotations

from typing import Any

import httpx

from server.http.threaded import ThreadedServer
from server.simulator import Reply, Scenario, SimulatorServer, Step, ToolCallSpec
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL

OPENWEBUI = {"authorization": f"Bearer {KEY_ALICE}", "x-openwebui-chat-id": "chat-side-tasks"}
TITLE_TASK = (
    "### Task:\nGenerate a concise title summarizing the chat history.\n### Guidelines:\n"
    '- Keep it short.\n### Output:\nJSON format: { "title": "your concise title here" }\n'
    "### Chat History:\n<chat_history>\nUSER: what is in the report?\n</chat_history>"
)
# Open WebUI 0.12.4's DEFAULT_RAG_TEMPLATE (abridged) with its context filled in, put before
# the user's query in the user's message.
RAG_TURN = (
    "### Task:\nRespond to the user query using the provided context, incorporating inline "
    "citations in the format [id] **only when the <source> tag includes an explicit id "
    'attribute** (e.g., <source id="1">).\n\n### Guidelines:\n- If you don\'t know the answer, '
    "clearly state that.\n\n### Output:\nProvide a clear and direct response to the user's "
    'query.\n\n<context>\n<source id="1" name="report.txt">Sales rose by 20% in March.</source>'
    "\n</context>\n\nWhat is in the report?"
)


def _script(simulator: SimulatorServer, *replies: Reply) -> None:
    simulator.state.script(UPSTREAM_MODEL, Scenario(steps=[Step(reply=r) for r in replies]))


async def _post(
    hermes: ThreadedServer, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url, timeout=30) as http:
        response = await http.post(path, headers={**OPENWEBUI, **(headers or {})}, json=body)
        assert response.status_code == 200, response.text
        run_id = response.headers["x-hermes-run-id"]
        events = await http.get(f"/v1/runs/{run_id}/events", headers=OPENWEBUI)
    assert "tool_started" not in events.text  # nothing ran
    return response


def _chat(content: str) -> dict[str, Any]:
    return {"model": "hermes-agent", "messages": [{"role": "user", "content": content}]}


def _responses(content: str) -> dict[str, Any]:
    return {"model": "hermes-agent", "input": [{"role": "user", "content": content}]}


def _lookup() -> ToolCallSpec:
    return ToolCallSpec(name="memory", arguments={"action": "add", "content": "a note"})


async def test_a_side_task_runs_no_tool_the_model_calls_and_answers_with_its_text(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(text='{"title": "Report"}', tool_calls=[_lookup()]))
    response = await _post(hermes, "/v1/chat/completions", _chat(TITLE_TASK))
    message = response.json()["choices"][0]["message"]
    assert message["content"] == '{"title": "Report"}'
    assert not message.get("tool_calls")
    (upstream,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert "tools" not in upstream.body


async def test_a_side_task_answered_only_with_a_tool_call_is_an_empty_json_object(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(tool_calls=[_lookup()]))
    response = await _post(hermes, "/v1/chat/completions", _chat(TITLE_TASK))
    assert response.json()["choices"][0]["message"]["content"] == "{}"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 1


async def test_a_side_task_on_responses_runs_no_tool_the_model_calls(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(tool_calls=[_lookup()]))
    response = await _post(hermes, "/v1/responses", _responses(TITLE_TASK))
    output = response.json()["output"]
    assert [item["type"] for item in output] == ["message"]
    assert output[0]["content"][0]["text"] == "{}"
    assert len(simulator.state.requests(scenario=UPSTREAM_MODEL)) == 1


async def _a_conversation_turn(
    simulator: SimulatorServer, response: httpx.Response, answer: str
) -> None:
    """``response`` came from a run of the agent on the conversation, not a side task."""
    assert response.headers["x-hermes-session-id"] == OPENWEBUI["x-openwebui-chat-id"]
    (upstream,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert "lookup" in str(upstream.body["tools"])  # the agent's own tools were offered
    assert answer in response.text


async def test_a_non_streamed_rag_turn_is_a_turn_of_the_conversation(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(text="Sales rose by 20% [1]."))
    response = await _post(hermes, "/v1/chat/completions", _chat(RAG_TURN))
    await _a_conversation_turn(simulator, response, "Sales rose by 20% [1].")


async def test_a_non_streamed_rag_turn_on_responses_is_a_turn_of_the_conversation(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(text="Sales rose by 20% [1]."))
    response = await _post(hermes, "/v1/responses", _responses(RAG_TURN))
    await _a_conversation_turn(simulator, response, "Sales rose by 20% [1].")


async def test_a_task_header_makes_any_prompt_a_side_task(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(text='{"title": "Report"}'))
    headers = {"x-openwebui-task": "title_generation"}
    response = await _post(hermes, "/v1/chat/completions", _chat("Title, please."), headers)
    assert "x-hermes-session-id" not in response.headers
    (upstream,) = simulator.state.requests(scenario=UPSTREAM_MODEL)
    assert "tools" not in upstream.body


async def test_an_empty_task_header_makes_a_task_prompt_a_conversation_turn(
    simulator: SimulatorServer, hermes: ThreadedServer
) -> None:
    _script(simulator, Reply(text="A title is not what I will give."))
    headers = {"x-openwebui-task": ""}
    response = await _post(hermes, "/v1/responses", _responses(TITLE_TASK), headers)
    await _a_conversation_turn(simulator, response, "A title is not what I will give.")
