"""Approvals of dangerous tool calls on every surface, against a real server process: a chat
user answering in the next turn, a Responses client answering ``mcp_approval_request`` with
``mcp_approval_response``, and a client answering through ``/v1/runs/{id}/approvals`` while
the run waits; and a request nobody answers in time turning into a denial the model is told."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from hermes_core.tools.workspace import Workspace
from server.simulator import SimulatorServer
from tests.server.tools.conftest import (
    KEY_BOB,
    MODEL,
    ToolServer,
    answer,
    call,
    script,
    sse_data,
    tool_results,
    until,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

DANGEROUS = "rm -rf build"
WAIT = "x-hermes-approval-wait"


def _with_build_dir(server: ToolServer, conversation: str) -> Path:
    """A ``build/out.o`` in the conversation's workspace, made as the server's tools make
    files (owned by the sandbox's user when the server is root)."""
    workspace = Workspace(server.workspace(conversation))
    build = workspace.makedirs("build")
    os.close(workspace.open("build/out.o", os.O_CREAT | os.O_WRONLY))
    return build


async def _ask_on_chat(openai: AsyncOpenAI, conversation: str) -> tuple[str, Any]:
    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "clean the build"}],
        extra_headers={"x-hermes-session-id": conversation},
    )
    return completion.choices[0].message.content or "", completion


async def _answer_on_chat(openai: AsyncOpenAI, conversation: str, question: str, words: str) -> str:
    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "clean the build"},
            {"role": "assistant", "content": question},
            {"role": "user", "content": words},
        ],
        extra_headers={"x-hermes-session-id": conversation},
    )
    return completion.choices[0].message.content or ""


async def test_a_chat_run_asks_and_ends_awaiting_approval_then_approve_runs_the_call(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    build = _with_build_dir(tool_server, "chat-approve")
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    question, completion = await _ask_on_chat(openai, "chat-approve")

    assert completion.choices[0].finish_reason == "stop"
    assert completion.model_extra is not None
    assert completion.model_extra["hermes"]["exit_reason"] == "awaiting_approval"
    assert DANGEROUS in question
    assert "approve" in question
    assert build.exists(), "the call ran before anyone approved it"

    script(simulator, answer("Cleaned."))
    assert await _answer_on_chat(openai, "chat-approve", question, "approve") == "Cleaned."
    assert tool_results(simulator)[-1].startswith("[exit code 0;")
    assert not build.exists()


async def test_a_chat_user_denying_in_the_next_turn_keeps_the_call_from_running(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    build = _with_build_dir(tool_server, "chat-deny")
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    question, _ = await _ask_on_chat(openai, "chat-deny")

    script(simulator, answer("I left it alone."))
    assert await _answer_on_chat(openai, "chat-deny", question, "deny") == "I left it alone."
    assert tool_results(simulator)[-1].startswith("Denied by the user: shell")
    assert build.exists()


async def test_approve_for_this_session_lets_later_calls_of_the_tool_run_without_asking(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    _with_build_dir(tool_server, "chat-session-grant")
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    question, _ = await _ask_on_chat(openai, "chat-session-grant")
    script(simulator, call("shell", command="rm -rf dist"), answer("Both gone."))

    said = await _answer_on_chat(openai, "chat-session-grant", question, "approve for this session")

    assert said == "Both gone."
    assert all(r.startswith("[exit code 0;") for r in tool_results(simulator)[-2:])


async def test_a_response_asks_with_mcp_approval_request_and_an_approval_response_runs_it(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(
        simulator,
        call("code", code="import shutil\nshutil.rmtree('build', ignore_errors=True)"),
        answer("unreached"),
    )
    first = await openai.responses.create(model=MODEL, input="clean the build")
    (ask,) = [item for item in first.output if item.type == "mcp_approval_request"]
    assert ask.name == "code"
    assert ask.server_label == "hermes"
    assert "rmtree" in ask.arguments
    assert first.status == "completed"
    assert "approval" in first.output_text

    script(simulator, answer("Cleaned."))
    second = await openai.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": True}],
    )

    assert second.output_text == "Cleaned."
    assert tool_results(simulator)[-1].startswith("[exit code 0;")


async def test_an_mcp_approval_response_that_denies_tells_the_model(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    first = await openai.responses.create(model=MODEL, input="clean the build")
    (ask,) = [item for item in first.output if item.type == "mcp_approval_request"]

    script(simulator, answer("Understood."))
    second = await openai.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": False}],
    )

    assert second.output_text == "Understood."
    assert tool_results(simulator)[-1].startswith("Denied by the user: shell")


async def _asked_while_waiting(lines: AsyncIterator[str]) -> dict[str, Any]:
    """Read a chat stream up to the approval request it shows; the request's fields."""
    async for line in lines:
        for frame in sse_data(line):
            hermes = frame["choices"][0]["delta"].get("hermes") if frame["choices"] else None
            if hermes and hermes["type"] == "approval" and hermes["phase"] == "requested":
                return dict(hermes)
    raise AssertionError("the stream ended without asking")


CHAT_STREAM = {
    "model": MODEL,
    "stream": True,
    "messages": [{"role": "user", "content": "clean the build"}],
}


async def test_a_run_waiting_for_approval_shows_it_and_goes_on_when_the_endpoint_approves(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    build = _with_build_dir(tool_server, "runs-approve")
    script(simulator, call("shell", command=DANGEROUS), answer("Cleaned."))
    headers = {WAIT: "60", "x-hermes-session-id": "runs-approve"}

    stream = http.stream("POST", "/v1/chat/completions", json=CHAT_STREAM, headers=headers)
    async with stream as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        asked = await _asked_while_waiting(lines)

        run = (await http.get(f"/v1/runs/{run_id}")).json()
        (pending,) = run["approvals"]
        assert pending["id"] == asked["approval_id"]
        assert pending["status"] == "pending"
        assert pending["tool"] == "shell"
        assert pending["toolset"] == "shell"
        assert pending["arguments"] == {"command": DANGEROUS}
        assert run["status"] == "running"
        assert build.exists()

        url = f"/v1/runs/{run_id}/approvals/{asked['approval_id']}"
        decided = await http.post(url, json={"approve": True})
        assert decided.status_code == 200
        assert decided.json()["status"] == "approved"
        frames = sse_data("\n".join([line async for line in lines]))

    assert frames[-1]["hermes"]["exit_reason"] == "completed"
    content = "".join(f["choices"][0]["delta"].get("content") or "" for f in frames)
    assert content == "Cleaned."
    assert not build.exists()
    again = await http.post(url, json={"approve": False})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "approval_answered"


async def test_a_run_waiting_for_approval_is_denied_through_the_endpoint(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    build = _with_build_dir(tool_server, "runs-deny")
    script(simulator, call("shell", command=DANGEROUS), answer("Left it."))
    headers = {WAIT: "60", "x-hermes-session-id": "runs-deny"}

    stream = http.stream("POST", "/v1/chat/completions", json=CHAT_STREAM, headers=headers)
    async with stream as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        asked = await _asked_while_waiting(lines)
        url = f"/v1/runs/{run_id}/approvals/{asked['approval_id']}"

        # Another key cannot even see it.
        bob = await http.post(
            url, json={"approve": True}, headers={"authorization": f"Bearer {KEY_BOB}"}
        )
        assert bob.status_code == 404

        decided = await http.post(url, json={"approve": False})
        assert decided.json()["status"] == "denied"
        frames = sse_data("\n".join([line async for line in lines]))

    assert frames[-1]["hermes"]["exit_reason"] == "completed"
    assert tool_results(simulator)[-1].startswith("Denied by the user: shell")
    assert build.exists()
    run = (await http.get(f"/v1/runs/{run_id}")).json()
    assert run["approvals"][0]["status"] == "denied"


async def test_an_approval_nobody_answers_in_time_expires_into_a_denial_the_model_reads(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    build = _with_build_dir(tool_server, "runs-expire")
    script(simulator, call("shell", command=DANGEROUS), answer("Nobody answered."))
    headers = {WAIT: "1", "x-hermes-session-id": "runs-expire"}

    response = await http.post(
        "/v1/chat/completions",
        json={**CHAT_STREAM, "stream": False},
        headers=headers,
    )

    assert response.status_code == 200
    body = response.json()
    assert body["choices"][0]["message"]["content"] == "Nobody answered."
    assert tool_results(simulator)[-1].startswith("Denied: shell needed the user's approval")
    assert build.exists()
    run = (await http.get(f"/v1/runs/{body['hermes']['run_id']}")).json()
    assert run["approvals"][0]["status"] == "expired"


async def test_a_bad_approval_wait_header_or_answer_is_a_400(
    tool_server: ToolServer, http: httpx.AsyncClient
) -> None:
    response = await http.post(
        "/v1/chat/completions",
        json={**CHAT_STREAM, "stream": False},
        headers={WAIT: "forever"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == WAIT

    answer_ = await http.post("/v1/runs/run_x/approvals/ap_x", json={"approve": "maybe"})
    assert answer_.status_code == 400
    missing = await http.post("/v1/runs/run_x/approvals/ap_x", json={"approve": True})
    assert missing.status_code == 404


async def test_stopping_a_run_that_waits_for_approval_closes_the_request_unanswered(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    headers = {WAIT: "60", "x-hermes-session-id": "runs-stop-waiting"}

    stream = http.stream("POST", "/v1/chat/completions", json=CHAT_STREAM, headers=headers)
    async with stream as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        asked = await _asked_while_waiting(lines)
        assert (await http.post(f"/v1/runs/{run_id}/stop")).status_code == 202
        frames = sse_data("\n".join([line async for line in lines]))

    assert frames[-1]["hermes"]["exit_reason"] == "interrupted"

    async def closed() -> bool:
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        return bool(run["approvals"][0]["status"] == "expired")

    assert await until(closed, server=tool_server)
    # The conversation's next words are not taken as an answer to it.
    url = f"/v1/runs/{run_id}/approvals/{asked['approval_id']}"
    assert (await http.post(url, json={"approve": True})).status_code == 409


async def test_a_streamed_response_asks_with_an_approval_item_a_streamed_answer_runs_it(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    build = _with_build_dir(tool_server, "streamed-ask")
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    headers = {"x-hermes-session-id": "streamed-ask"}
    stream = await openai.responses.create(
        model=MODEL, input="clean the build", stream=True, extra_headers=headers
    )
    events = [event async for event in stream]

    done = [e.item for e in events if e.type == "response.output_item.done"]
    (ask,) = [item for item in done if item.type == "mcp_approval_request"]
    assert events[-1].type == "response.completed"
    final = events[-1].response
    assert [item.id for item in final.output if item.type == "mcp_approval_request"] == [ask.id]
    assert build.exists()

    script(simulator, answer("Cleaned."))
    answered = await openai.responses.create(
        model=MODEL,
        previous_response_id=final.id,
        input=[{"type": "mcp_approval_response", "approval_request_id": ask.id, "approve": True}],
        stream=True,
    )
    texts = [e.delta async for e in answered if e.type == "response.output_text.delta"]
    assert "".join(texts) == "Cleaned."
    assert not build.exists()


async def test_an_answer_posted_before_the_next_turn_is_the_one_acted_on(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    build = _with_build_dir(tool_server, "posted-first")
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    question, completion = await _ask_on_chat(openai, "posted-first")
    run_id = completion.model_extra["hermes"]["run_id"]
    (pending,) = (await http.get(f"/v1/runs/{run_id}")).json()["approvals"]

    bob = await http.post(
        f"/v1/runs/{run_id}/approvals/{pending['id']}",
        json={"approve": True},
        headers={"authorization": f"Bearer {KEY_BOB}"},
    )
    assert bob.status_code == 404
    posted = await http.post(f"/v1/runs/{run_id}/approvals/{pending['id']}", json={"approve": True})
    assert posted.json()["status"] == "approved"

    # The next turn's words ("no") do not overturn the answer already given.
    script(simulator, answer("Cleaned."))
    assert await _answer_on_chat(openai, "posted-first", question, "no") == "Cleaned."
    assert not build.exists()
    again = await http.post(f"/v1/runs/{run_id}/approvals/{pending['id']}", json={"approve": False})
    assert again.status_code == 409


async def test_approve_said_on_another_branch_of_the_conversation_runs_nothing(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    build = _with_build_dir(tool_server, "forked-approve")
    script(simulator, call("shell", command=DANGEROUS), answer("unreached"))
    _, completion = await _ask_on_chat(openai, "forked-approve")
    run_id = completion.model_extra["hermes"]["run_id"]

    # The person went back and edited the assistant's turn: "approve" there answers nothing.
    script(simulator, answer("Nothing to approve here."))
    said = await _answer_on_chat(openai, "forked-approve", "Something else entirely.", "approve")

    assert said == "Nothing to approve here."
    assert build.exists()
    (asked,) = (await http.get(f"/v1/runs/{run_id}")).json()["approvals"]
    assert asked["status"] == "expired"
