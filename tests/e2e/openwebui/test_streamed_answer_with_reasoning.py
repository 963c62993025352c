"""A streamed answer with reasoning: Open WebUI shows the text growing while it streams, then
the model's reasoning as a Thought block above the answer, and stores both."""

from __future__ import annotations

from server.simulator import Fault, Reply, SimulatorServer, Step
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI

REASONING = "The user greets me; greet back."
ANSWER = "Hello from the agent, one piece at a time!"


def test_a_streamed_answer_grows_on_the_page_and_shows_its_reasoning_as_a_thought_block(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    reply = Reply(reasoning=REASONING, text=ANSWER, chunk_count=8)
    script(simulator, Step(reply=reply, fault=Fault(chunk_delay=0.4)))
    webui.send("Hello")

    def partial() -> bool:
        shown = webui.answer_prose()
        return webui.generating() and 0 < len(shown) < len(ANSWER)

    webui.until("part of the answer shown while it streams", partial)
    webui.wait_turn_end()

    assert webui.answer_prose() == ANSWER
    shown = webui.answer_text()
    assert shown.index("Thought") < shown.index(ANSWER)
    output = webui.stored_answer()["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[0]["content"][0]["text"] == REASONING
    assert output[1]["content"][0]["text"] == ANSWER
