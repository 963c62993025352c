"""Each step's reasoning is its own Thought block, where the step is: over Chat Completions,
Open WebUI adds every ``reasoning_content`` to the one Thought block it has, above the answer,
so a second step's reasoning was glued onto the first step's ("I need to list files.Now I
know.") and shown before the text and the card that came before it."""

from __future__ import annotations

from typing import Any

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI

FIRST_THOUGHT, SECOND_THOUGHT = "I need to list the files.", "Now I know there is one."


def _text(item: dict[str, Any]) -> str:
    return "".join(part.get("text", "") for part in item.get("content") or [])


def test_each_steps_reasoning_is_its_own_thought_block_after_the_step_before(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        Step(
            reply=Reply(
                reasoning=FIRST_THOUGHT,
                text="Let me check the files.",
                tool_calls=[ToolCallSpec(name="shell", arguments={"command": "echo x"})],
            )
        ),
        Step(reply=Reply(reasoning=SECOND_THOUGHT, text="There is one file.", chunk_count=6)),
    )

    webui.ask("What files are there?")

    output = webui.stored_answer()["output"]
    assert [item["type"] for item in output] == [
        "reasoning",
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
    ]
    assert [_text(item) for item in output if item["type"] == "reasoning"] == [
        FIRST_THOUGHT,
        SECOND_THOUGHT,
    ]
    assert all(item["status"] == "completed" for item in output if item["type"] == "reasoning")
    prose = webui.answer_prose()  # Thought blocks closed
    assert "There is one file." in prose
    assert FIRST_THOUGHT not in prose
    assert SECOND_THOUGHT not in prose
    # The first Thought block, opened, holds the first step's reasoning only; the second
    # step's is in the group with the card (as a Responses connection shows it).
    webui.last_answer().get_by_text("Thought for").first.click()
    shown = webui.until("the first Thought block open", lambda: _has(webui, FIRST_THOUGHT))
    assert SECOND_THOUGHT not in shown
    assert shown.index(FIRST_THOUGHT) < shown.index("Let me check the files.")
    webui.last_answer().get_by_text("Explored").first.click()
    shown = webui.until("the group with the card open", lambda: _has(webui, "View Result"))
    assert shown.index("View Result from shell") < shown.rindex("Thought")
    assert "Thinking" not in shown


def _has(webui: WebUI, text: str) -> str | None:
    shown = webui.answer_text()
    return shown if text in shown else None
