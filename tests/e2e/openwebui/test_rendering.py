"""How Open WebUI renders a run's progress, in a real browser: a Stop during a command leaves
nothing that claims to run (on the page, in Open WebUI's store, after a reload); a Responses
connection shows a command's output live; an approval is a question, then what the user
decided."""

from __future__ import annotations

from typing import Any

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import RESPONSES_MODEL, script
from tests.e2e.openwebui.webui import WebUI


def shell(command: str) -> Step:
    return Step(
        reply=Reply(tool_calls=[ToolCallSpec(name="shell", arguments={"command": command})])
    )


def says(text: str) -> Step:
    return Step(reply=Reply(text=text))


def counting(seconds: int) -> str:
    return f"for i in $(seq 1 {seconds}); do echo step $i; sleep 1; done"


def unfinished(answer: dict[str, Any]) -> list[str]:
    """What a stored answer still shows as under way: statuses not done, tool calls with
    neither an output nor an ending."""
    left = [
        f"status {s.get('description')!r}"
        for s in answer.get("statusHistory") or []
        if not s.get("done")
    ]
    output = answer.get("output") or []
    answered = {
        item.get("call_id") for item in output if item.get("type") == "function_call_output"
    }
    for item in output:
        if (
            item.get("type") == "function_call"
            and item.get("call_id") not in answered
            and item.get("status") not in ("incomplete", "failed")
        ):
            left.append(f"tool call {item.get('name')} ({item.get('status')})")
    return left


def shimmering(webui: WebUI) -> int:
    """Lines of the last answer drawn as under way (Open WebUI shimmers them)."""
    lines: int = webui.last_answer().locator(".shimmer").count()
    return lines


def test_a_stop_during_a_command_leaves_nothing_running_on_the_page_or_in_the_store(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(simulator, shell(counting(60)), says("unreached"))
    webui.send("count to sixty")
    webui.until(
        "the command's output in the status line", lambda: "shell: step 2" in webui.status_text()
    )

    webui.stop()

    webui.until("the stopped answer stored as done", lambda: webui.stored_answer().get("done"))
    assert unfinished(webui.stored_answer()) == []
    webui.until("nothing shimmering", lambda: shimmering(webui) == 0)
    webui.page.reload(wait_until="load")
    webui.until("the answer shown again", lambda: "shell" in webui.status_text())
    assert shimmering(webui) == 0
    assert "Executing" not in webui.answer_text()


def test_a_responses_connection_shows_a_commands_output_live(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    webui.open(RESPONSES_MODEL)
    script(simulator, shell(counting(6)), says("Counted to six."))
    webui.send("count to six")

    seen: set[str] = set()

    def lines_while_running() -> bool:
        status = webui.status_text()
        if status.startswith("shell: step"):
            seen.add(status)
        return len(seen) >= 2

    webui.until("two successive output lines of the command", lines_while_running)
    webui.wait_turn_end()
    assert "Counted to six." in webui.answer_text()
    assert unfinished(webui.stored_answer()) == []


def ask_to_remove(webui: WebUI, simulator: SimulatorServer) -> None:
    script(simulator, shell("rm -rf build"), says("unreached"))
    webui.ask("clean the build")


def test_an_approval_is_a_question_and_a_denial_shows_as_denied(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    ask_to_remove(webui, simulator)

    assert "approve" in webui.answer_text()
    assert webui.status_text().startswith("shell needs your approval:")
    assert webui.last_answer().locator(".text-red-500").count() == 0  # no failed card
    stored = webui.stored_answer()
    outputs = [i for i in stored["output"] if i.get("type") == "function_call_output"]
    assert outputs
    assert not any(o["output"][0]["text"].startswith("Error") for o in outputs)

    script(simulator, says("I left the build alone."))
    answer = webui.ask("deny")

    assert "Denied shell" in answer
    assert webui.status_text() == "Done"
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert "shell denied by the user: it did not run" in statuses
    assert not [s for s in statuses if "running" in s.lower()]


def test_an_approved_command_runs_and_its_card_shows_the_result(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    ask_to_remove(webui, simulator)

    script(simulator, says("Cleaned."))
    answer = webui.ask("approve")

    assert "Cleaned." in answer
    assert "View Result from shell" in answer
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert statuses[0] == "shell approved by the user"
