"""Approved "for this session", a later dangerous call of the same tool runs without a question,
and its answer's status history never says it needs the user's approval: the standing grant
answers the ask at once, and the line "shell needs your approval: … — reply approve or deny"
stayed in the history of an answer that asked nothing."""

from __future__ import annotations

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call


def test_a_call_approved_for_the_session_runs_without_a_question_in_its_status_lines(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command="rm -rf build"), answer("unreached"))
    webui.ask("Clean the build")
    assert webui.status_text().startswith("shell needs your approval:")
    script(simulator, answer("Cleaned the build."))
    assert "Cleaned the build." in webui.ask("approve for this session")

    script(simulator, call("shell", command="rm -rf dist"), answer("Cleaned dist too."))
    shown = webui.ask("Clean dist as well")

    assert "Cleaned dist too." in shown
    assert "View Result from shell" in shown
    assert webui.status_text() == "Done"
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert not [line for line in statuses if "needs your approval" in line], statuses
    assert "shell done" in statuses
