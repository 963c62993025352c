"""A tool the server ran shows as exactly one Open WebUI tool card, with its output, and is
stored as one call and its output (Open WebUI never runs it itself)."""

from __future__ import annotations

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call


def test_a_shell_call_shows_one_card_with_its_output(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(
        simulator, call("shell", command="echo hello-from-the-sandbox"), answer("It said hello.")
    )

    webui.ask("Say hello from the shell")

    assert webui.answer_prose() == "It said hello."
    cards = webui.tool_cards()
    assert cards.count() == 1
    assert "View Result from shell" in cards.first.inner_text()
    shown = webui.open_card(cards.first)
    assert "echo hello-from-the-sandbox" in shown  # its input
    assert "[exit code 0;" in shown
    assert "hello-from-the-sandbox" in shown.split("OUTPUT", 1)[1]
    output = webui.stored_answer()["output"]
    kinds = [item["type"] for item in output]
    assert kinds.count("function_call") == 1
    assert kinds.count("function_call_output") == 1
    (started,) = [item for item in output if item["type"] == "function_call"]
    (ended,) = [item for item in output if item["type"] == "function_call_output"]
    assert ended["call_id"] == started["call_id"]
    assert "hello-from-the-sandbox" in ended["output"][0]["text"]
    # One model call for the tool, one for the answer: Open WebUI called nothing back.
    assert len(simulator.state.requests()) == 2


def test_a_tool_answering_with_an_error_is_shown_failed_not_done(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(simulator, call("read_file", path="no-such-file.txt"), answer("There is no such file."))

    webui.ask("Read no-such-file.txt")

    assert webui.answer_prose() == "There is no such file."
    shown = webui.open_card(webui.tool_cards().first)
    assert "Error: no such file in the workspace" in shown
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert "read_file failed" in statuses
    assert "read_file done" not in statuses
