"""A tool that fails shows one red card whose output says the tool's error once: the tool's own
``Error: …`` answer is not prefixed again (it read "Error: Error: no such file…"), and the model
that reads the error and recovers gives the answer."""

from __future__ import annotations

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call


def test_a_failed_tool_card_says_its_error_once_and_the_answer_follows(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        call("read_file", path="missing.txt"),
        answer("There is no missing.txt; nothing to read."),
    )

    webui.ask("Read missing.txt")

    assert webui.answer_prose() == "There is no missing.txt; nothing to read."
    card = webui.tool_cards("read_file")
    assert card.count() == 1
    assert card.first.locator(".text-red-500").count() == 1  # drawn as failed
    shown = webui.open_card(card.first)
    assert "Error: no such file in the workspace" in shown
    assert "Error: Error:" not in shown
    assert webui.status_text() == "Done"


def test_a_command_that_exits_non_zero_shows_one_red_card_with_its_output(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        call("shell", command="echo half-done; exit 3"),
        answer("The command failed with exit code 3."),
    )

    webui.ask("Run the command")

    assert webui.answer_prose() == "The command failed with exit code 3."
    card = webui.tool_cards("shell")
    assert card.count() == 1  # the card re-sent as failed replaced the first, by its id
    assert card.first.locator(".text-red-500").count() == 1  # drawn as failed
    shown = webui.open_card(card.first)
    assert "[exit code 3;" in shown
    assert "half-done" in shown
    assert webui.status_text() == "Done"
