"""On a Responses connection (``api_type: responses``) too, a command that exits non-zero shows
one red card with its output, and the conversation goes on: the next turn, which sends the
failed card back as input, is answered."""

from __future__ import annotations

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import RESPONSES_MODEL, script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call


def test_a_command_that_exits_non_zero_shows_a_red_card_and_the_next_turn_is_answered(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    webui.open(RESPONSES_MODEL)
    script(
        simulator,
        call("shell", command="echo half-done; exit 3"),
        answer("The command failed with exit code 3."),
        answer("It printed half-done first."),
    )

    webui.ask("Run the command")

    assert webui.answer_prose() == "The command failed with exit code 3."
    card = webui.tool_cards("shell")
    assert card.count() == 1  # the card done again as failed replaced the first, at its index
    assert card.first.locator(".text-red-500").count() == 1  # drawn as failed
    shown = webui.open_card(card.first)
    assert "[exit code 3;" in shown
    assert "half-done" in shown

    webui.ask("What did it print?")
    assert webui.answer_prose() == "It printed half-done first."
