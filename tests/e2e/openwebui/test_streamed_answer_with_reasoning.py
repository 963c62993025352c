"""A streamed answer with reasoning: Open WebUI shows the model's reasoning as a Thought block
above the answer, and stores both."""

from __future__ import annotations

from server.simulator import Reply, SimulatorServer, Step
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI


def test_a_streamed_answer_shows_its_reasoning_as_a_thought_block_above_the_text(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        Step(
            reply=Reply(reasoning="The user greets me; greet back.", text="Hello from the agent!")
        ),
    )
    webui.send("Hello")
    webui.wait_turn_end()
    shown = webui.answer_text()
    assert "Hello from the agent!" in shown
    assert "Thought" in shown
