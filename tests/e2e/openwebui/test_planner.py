"""A profile with the planner on: the plan it writes before the first action is shown in Open
WebUI's status lines (a heading, then one line per step), before the command it leads to."""

from __future__ import annotations

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.servers import PLANNER_MODEL
from tests.e2e.openwebui.webui import WebUI

PLAN = "1. List the files in the workspace\n2. Count them\n3. Report the count"


def test_the_plan_is_shown_as_status_lines_before_the_first_command(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    listing = ToolCallSpec(name="shell", arguments={"command": "ls | wc -l"})
    script(
        simulator,
        Step(reply=Reply(text=PLAN)),  # the planning call (no tools offered)
        Step(reply=Reply(tool_calls=[listing])),
        Step(reply=Reply(text="There are no files yet.")),
    )
    webui.open(PLANNER_MODEL)

    assert "There are no files yet." in webui.ask("How many files are in the workspace?")

    shown = [status.get("description", "") for status in webui.stored_answer()["statusHistory"]]
    plan = shown.index("Plan: 3 steps")
    assert shown[plan + 1 : plan + 4] == [
        "1. List the files in the workspace",
        "2. Count them",
        "3. Report the count",
    ]
    assert any(line.startswith("shell") for line in shown[plan + 4 :]), shown
