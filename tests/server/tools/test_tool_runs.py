"""Runs that use the files, shell and code tools, against a real server process: several steps
in one workspace, the workspace kept across turns, a command's output streaming while it runs,
and stop or a client leaving killing the command with everything it started."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import (
    MODEL,
    ToolServer,
    answer,
    call,
    processes_running,
    script,
    sse_data,
    tool_results,
    until,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


def _find_in_workspaces(server: ToolServer, name: str) -> Path | None:
    """The workspace holding a file called ``name`` (tests mark a workspace this way when the
    conversation's name is the server's to choose)."""
    found = list((server.data_dir / "workspaces").glob(f"*/*/{name}"))
    return found[0].parent if found else None


async def test_a_chat_run_writes_a_script_runs_it_with_code_and_answers_from_its_output(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(
        simulator,
        call("write_file", path="totals.py", content="print('total', sum([12, 30]))\n"),
        call("code", code="import runpy\nrunpy.run_path('totals.py')"),
        answer("The total is 42."),
    )
    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Add 12 and 30 with a script."}],
        extra_headers={"x-hermes-session-id": "multi-step-chat"},
    )

    assert completion.choices[0].message.content == "The total is 42."
    wrote, ran = tool_results(simulator)
    assert "totals.py" in wrote
    assert ran.startswith("[exit code 0;")
    assert "total 42" in ran
    kept = tool_server.workspace("multi-step-chat") / "totals.py"
    assert kept.read_text() == "print('total', sum([12, 30]))\n"


async def test_the_next_chat_turn_edits_the_file_the_last_one_wrote(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    client, session = openai, {"x-hermes-session-id": "edit-next-turn"}
    script(simulator, call("write_file", path="notes.txt", content="draft one\n"), answer("ok"))
    await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "write it"}], extra_headers=session
    )
    script(
        simulator,
        call("edit_file", path="notes.txt", old_text="draft one", new_text="final"),
        call("shell", command="cat notes.txt"),
        answer("edited"),
    )
    await client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "write it"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "now edit the file you wrote"},
        ],
        extra_headers=session,
    )

    assert "final" in tool_results(simulator)[-1]
    assert (tool_server.workspace("edit-next-turn") / "notes.txt").read_text() == "final\n"


async def test_a_responses_run_writes_runs_and_reads_and_the_next_response_sees_the_file(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    client = openai
    script(
        simulator,
        call("code", code="open('squares.txt', 'w').write(str([n * n for n in range(5)]))"),
        call("read_file", path="squares.txt"),
        answer("Squares written."),
    )
    first = await client.responses.create(model=MODEL, input="Write the first squares.")
    assert first.status == "completed"
    assert first.output_text == "Squares written."
    ran, read = tool_results(simulator)
    assert ran.startswith("[exit code 0;")
    assert "[0, 1, 4, 9, 16]" in read

    script(simulator, call("shell", command="wc -c < squares.txt"), answer("16 bytes."))
    second = await client.responses.create(
        model=MODEL, input="How big is it?", previous_response_id=first.id
    )
    assert second.status == "completed"
    assert tool_results(simulator)[-1].startswith("[exit code 0;")
    assert tool_results(simulator)[-1].rstrip().endswith("16")


def _blocking_command(marker: str) -> str:
    """A command that prints a line, then waits until the test creates ``go`` beside it."""
    return (
        f"touch {marker}; echo ready-{marker}; "
        "while [ ! -e go ]; do sleep 0.05; done; echo finished"
    )


async def test_a_shell_commands_output_streams_on_chat_before_the_command_ends(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    marker = f"mark-{uuid.uuid4().hex[:10]}"
    script(simulator, call("shell", command=_blocking_command(marker)), answer("done"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "go"}]}

    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        seen: list[dict[str, Any]] = []
        hermes: dict[str, Any] = {}
        lines = response.aiter_lines()
        async for line in lines:
            if not line.startswith("data: {"):
                continue
            seen.extend(sse_data(line))
            hermes = seen[-1]["choices"][0]["delta"].get("hermes") or {}
            if hermes.get("phase") == "progress":
                break
        # The line came while the command still waits: nothing has finished it yet.
        assert f"ready-{marker}" in hermes["output"]
        assert "finished" not in hermes["output"]
        workspace = _find_in_workspaces(tool_server, marker)
        assert workspace is not None
        (workspace / "go").touch()
        rest = [line async for line in lines]

    frames = sse_data("\n".join(rest))
    finished = [
        f["choices"][0]["delta"]["hermes"]
        for f in frames
        if f["choices"] and f["choices"][0]["delta"].get("hermes", {}).get("phase") == "finished"
    ]
    assert finished
    assert finished[0]["ok"] is True
    assert "finished" in tool_results(simulator)[0]


async def test_a_shell_commands_output_streams_as_responses_events_before_the_command_ends(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    marker = f"mark-{uuid.uuid4().hex[:10]}"
    script(simulator, call("shell", command=_blocking_command(marker)), answer("done"))
    body = {"model": MODEL, "stream": True, "input": "go"}

    headers = {"x-hermes-progress": "events"}
    async with http.stream("POST", "/v1/responses", json=body, headers=headers) as response:
        assert response.status_code == 200
        lines = response.aiter_lines()
        progress: dict[str, Any] = {}
        async for line in lines:
            frames = sse_data(line)
            if frames and frames[0]["type"] == "hermes:tool_progress":
                progress = frames[0]
                if progress["phase"] == "progress":
                    break
        assert f"ready-{marker}" in progress["output"]
        workspace = _find_in_workspaces(tool_server, marker)
        assert workspace is not None
        (workspace / "go").touch()
        rest = sse_data("\n".join([line async for line in lines]))

    assert rest[-1]["type"] == "response.completed"
    assert any(f["type"] == "hermes:tool_progress" and f["phase"] == "finished" for f in rest)


async def test_open_webui_shows_a_command_that_exits_non_zero_as_a_failed_card(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    script(simulator, call("shell", command="echo half-done; exit 3"), answer("It failed."))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "try"}]}
    openwebui = {"x-openwebui-chat-id": f"owui-{uuid.uuid4().hex}"}

    response = await http.post("/v1/chat/completions", json=body, headers=openwebui)

    assert response.status_code == 200
    frames = sse_data(response.text)
    cards = [f["item"] for f in frames if f.get("type") == "response.output_item.added"]
    cards = [card for card in cards if card["type"].startswith("function_call")]
    assert [(card["type"], card["status"]) for card in cards] == [
        ("function_call", "completed"),  # running
        ("function_call", "failed"),  # the same card, drawn red
        ("function_call_output", "completed"),
    ]
    shown = cards[-1]["output"][0]["text"]
    assert shown.startswith("[exit code 3; ")
    assert "half-done" in shown
    statuses = [f["event"]["data"]["description"] for f in frames if "event" in f]
    assert "shell failed: exit code 3" in statuses
    # The model reads the command's report as before: its output and its exit code.
    assert tool_results(simulator)[0].startswith("[exit code 3; ")


async def test_stop_during_a_long_command_ends_the_run_and_leaves_no_process(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    seconds = f"30.{uuid.uuid4().int % 10**6:06d}"  # a command line no other test has
    script(simulator, call("shell", command=f"sleep {seconds}"), answer("unreachable"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "wait"}]}
    started = time.monotonic()

    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        assert await until(lambda: bool(processes_running(seconds)), server=tool_server)
        stopped = await http.post(f"/v1/runs/{run_id}/stop")
        assert stopped.status_code == 202
        frames = sse_data("\n".join([line async for line in lines]))

    final = frames[-1]
    assert final["hermes"]["exit_reason"] == "interrupted"
    assert time.monotonic() - started < 25, "the run waited for the command to end"
    assert await until(lambda: not processes_running(seconds), seconds=15, server=tool_server)
    run = (await http.get(f"/v1/runs/{run_id}")).json()
    assert run["status"] == "interrupted"


async def test_a_client_leaving_mid_command_kills_it(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    seconds = f"30.{uuid.uuid4().int % 10**6:06d}"
    script(simulator, call("code", code=f"import time\ntime.sleep({seconds})"), answer("never"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "wait"}]}

    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        assert await until(lambda: bool(processes_running(seconds)), server=tool_server)
    # The client is gone: the server interrupts the run and kills the command's tree.

    assert await until(lambda: not processes_running(seconds), seconds=15, server=tool_server)

    async def interrupted() -> bool:
        status: str = (await http.get(f"/v1/runs/{run_id}")).json()["status"]
        return status == "interrupted"

    assert await until(interrupted, server=tool_server)


async def test_stopping_a_response_during_a_long_command_leaves_no_process(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    seconds = f"30.{uuid.uuid4().int % 10**6:06d}"
    script(simulator, call("shell", command=f"sleep {seconds}"), answer("unreachable"))
    body = {"model": MODEL, "stream": True, "input": "wait"}

    async with http.stream("POST", "/v1/responses", json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        lines = response.aiter_lines()
        assert await until(lambda: bool(processes_running(seconds)), server=tool_server)
        assert (await http.post(f"/v1/runs/{run_id}/stop")).status_code == 202
        frames = sse_data("\n".join([line async for line in lines]))

    assert frames[-1]["type"] == "response.incomplete"
    assert await until(lambda: not processes_running(seconds), seconds=15, server=tool_server)


async def test_a_shell_commands_output_is_a_native_run_event_before_the_command_ends(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    marker = f"mark-{uuid.uuid4().hex[:10]}"
    script(simulator, call("shell", command=_blocking_command(marker)), answer("done"))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "go"}]}

    async with http.stream("POST", "/v1/chat/completions", json=body) as response:
        run_id = response.headers["x-hermes-run-id"]
        async with http.stream("GET", f"/v1/runs/{run_id}/events") as events:
            kinds: list[str] = []
            lines = events.aiter_lines()
            async for line in lines:
                if line.startswith("event: "):
                    kinds.append(line[7:])
                    if kinds[-1] == "tool_progress":
                        break
            assert "tool_finished" not in kinds
            workspace = _find_in_workspaces(tool_server, marker)
            assert workspace is not None
            (workspace / "go").touch()
            rest = [line[7:] async for line in lines if line.startswith("event: ")]
        async for _ in response.aiter_lines():
            pass

    assert "tool_finished" in rest
    assert rest[-1] == "run_finished"
