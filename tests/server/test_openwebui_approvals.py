"""An approval as Open WebUI shows it, over real HTTP: the question as a question (not a
failed tool), then, on the next turn, what the user decided."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from server.http.threaded import ThreadedServer
from server.simulator import SimulatorServer
from tests.server.test_openwebui_progress import (
    calls,
    cards,
    chat,
    openwebui_server,
    respond,
    says,
    script,
    statuses,
)

ASKED = "remove needs your approval: removes things — reply approve or deny"


@pytest.fixture(scope="module")
def server(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedServer]:
    with openwebui_server(_simulator_server, tmp_path_factory.mktemp("owui")) as running:
        yield running


def answer_text(frames: list[dict[str, Any]]) -> str:
    return "".join(
        f["choices"][0]["delta"].get("content") or "" for f in frames if f.get("choices")
    )


async def ask(simulator: SimulatorServer, server: ThreadedServer, chat_id: str) -> str:
    """A first turn that ends asking to remove junk; its question."""
    script(simulator, calls("remove", what="junk"), says("unreached"))
    return answer_text(await chat(server, chat_id, "remove the junk"))


async def test_a_question_for_approval_shows_as_a_pending_question_not_a_failure(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    script(simulator, calls("remove", what="junk"), says("unreached"))

    frames = await chat(server, "owui-ask", "remove the junk")

    output = next(c for c in cards(frames) if c["type"] == "function_call_output")
    assert not output["output"][0]["text"].startswith("Error")
    assert statuses(frames)[-1] == {"description": ASKED, "done": True}
    assert not [s for s in statuses(frames) if "failed" in s["description"]]
    assert "approve" in answer_text(frames)  # the question is the answer's text
    thought = [
        f for f in frames if f.get("choices") and "reasoning_content" in f["choices"][0]["delta"]
    ]
    assert thought == []  # and not repeated in the Thought block


async def test_a_denied_call_shows_as_denied_by_the_user_on_the_next_turn(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    question = await ask(simulator, server, "owui-deny")
    script(simulator, says("I left the junk alone."))

    frames = await chat(server, "owui-deny", "remove the junk", question, "deny")

    call, output = cards(frames)
    assert call["status"] == "rejected"  # Open WebUI: "Denied remove"
    assert output["output"][0]["text"].startswith("Denied by the user")
    said = [s["description"] for s in statuses(frames)]
    assert "remove denied by the user: it did not run" in said
    assert not [line for line in said if "running" in line.lower()]
    assert answer_text(frames) == "I left the junk alone."


async def test_an_approved_call_runs_on_the_next_turn_and_its_card_shows_the_output(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    question = await ask(simulator, server, "owui-approve")
    script(simulator, says("Removed."))

    frames = await chat(server, "owui-approve", "remove the junk", question, "approve")

    call, output = cards(frames)
    assert call["status"] == "completed"
    assert output["output"][0]["text"] == "removed junk"
    said = [s["description"] for s in statuses(frames)]
    assert said[0] == "remove approved by the user"
    assert said[-2:] == ["remove done", "Done"]


async def test_on_a_responses_connection_a_denied_call_shows_as_denied_by_the_user(
    simulator: SimulatorServer, server: ThreadedServer
) -> None:
    script(simulator, calls("remove", what="junk"), says("unreached"))
    first = await respond(server, "owui-responses-deny", "remove the junk")
    asked = statuses(first)[-1]["description"]
    question = first[-1]["response"]["output"][-1]["content"][0]["text"]
    script(simulator, says("I left the junk alone."))

    events = await respond(server, "owui-responses-deny", "remove the junk", question, "deny")

    assert asked == ASKED
    output = events[-1]["response"]["output"]
    (call,) = [item for item in output if item["type"] == "function_call"]
    assert call["status"] == "rejected"  # Open WebUI: "Denied remove"
    said = [s["description"] for s in statuses(events)]
    assert "remove denied by the user: it did not run" in said
