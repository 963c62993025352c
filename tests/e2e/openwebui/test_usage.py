"""The token usage under an answer is the whole turn's: every model call of the agent loop
summed into the one usage Open WebUI shows in the answer's (i) tooltip and stores."""

from __future__ import annotations

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI


def test_the_usage_shown_under_an_answer_sums_every_model_call_of_the_turn(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    calling = Reply(
        tool_calls=[ToolCallSpec(name="shell", arguments={"command": "echo hi"})],
        output_tokens=7,
    )
    script(
        simulator,
        Step(reply=calling),
        Step(reply=Reply(text="Done.", output_tokens=11)),
    )

    webui.ask("Say hi from the shell")

    usage = webui.stored_answer()["usage"]
    assert usage["completion_tokens"] == 18
    assert usage["output_tokens"] == 18  # Open WebUI adds up usage chunks: there was one
    assert usage["total_tokens"] == usage["prompt_tokens"] + 18
    shown = webui.usage_text()
    assert "completion_tokens: 18" in shown.replace('"', "")
