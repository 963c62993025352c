"""A running command's output reaches the page while it runs: the status line follows it line
by line and the tool card says it is executing, until the answer ends it."""

from __future__ import annotations

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call

COUNTING = "for i in 1 2 3 4 5 6; do echo step $i; sleep 1; done"


def test_a_running_shell_command_shows_its_output_lines_as_they_come(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(simulator, call("shell", command=COUNTING), answer("Counted to six."))
    webui.send("Count to six slowly")

    seen: list[str] = []

    def two_lines_while_running() -> bool:
        status = webui.status_text()
        if status.startswith("shell: step") and status not in seen:
            assert "Executing shell" in webui.tool_cards("shell").first.inner_text()
            seen.append(status)
        return len(seen) >= 2

    webui.until("two successive output lines while the command runs", two_lines_while_running)
    webui.wait_turn_end()

    assert webui.answer_prose() == "Counted to six."
    assert "View Result from shell" in webui.tool_cards("shell").first.inner_text()
    numbers = [int(line.rsplit(" ", 1)[1]) for line in seen]
    assert numbers == sorted(numbers)
    assert numbers[-1] < 6  # seen before the command had finished
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert all(s["done"] for s in webui.stored_answer()["statusHistory"])
    assert "shell: step 6" in statuses
