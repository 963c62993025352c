"""Stop while a shell command runs, then a next turn: the model's next request holds the stopped
call and its cancellation before the new message (Open WebUI leaves the stopped call out of the
history it sends, and the server keeps it), and the page shows the next answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import MODEL, RESPONSES_MODEL, UPSTREAM, script
from tests.e2e.openwebui.servers import Hermes
from tests.e2e.openwebui.webui import WebUI

FIRST, SECOND = "Run the long job.", "Never mind, say hello."
LONG_JOB = "touch started && sleep 60 && touch finished"


def _model_messages(simulator: SimulatorServer) -> list[dict[str, Any]]:
    """The messages of the model's last request, without the system prompt."""
    messages: list[dict[str, Any]] = simulator.state.requests(scenario=UPSTREAM)[-1].body[
        "messages"
    ]
    return [message for message in messages if message["role"] != "system"]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or ())


def _stopped_call(webui: WebUI) -> Callable[[], dict[str, Any] | None]:
    """Open WebUI's stored stopped answer's tool call, once the answer is stored as done."""

    def check() -> dict[str, Any] | None:
        answer = webui.stored_answer()
        output = answer.get("output") or []
        calls = [item for item in output if item.get("type") == "function_call"]
        if not answer.get("done") or not calls:
            return None
        assert [item.get("status") for item in calls] == ["incomplete"], output
        assert not [item for item in output if item.get("type") == "function_call_output"]
        call: dict[str, Any] = calls[0]
        return call

    return check


@pytest.mark.parametrize("model", [MODEL, RESPONSES_MODEL], ids=["chat", "responses"])
def test_the_turn_after_a_stop_during_a_shell_command_sees_the_cancelled_call(
    webui: WebUI, simulator: SimulatorServer, hermes: Hermes, model: str
) -> None:
    if model != MODEL:
        webui.open(model)
    script(
        simulator,
        Step(reply=Reply(tool_calls=[ToolCallSpec(name="shell", arguments={"command": LONG_JOB})])),
        Step(reply=Reply(text="Hello, and the long job stays stopped.")),
    )
    webui.send(FIRST)
    chat = webui.chat_id()
    # Looked up on every poll: the chat's workspace is under its user's owner, which it is
    # found by only once the run has made it.
    webui.until("the command running", lambda: (hermes.workspace(chat) / "started").exists())
    workspace = hermes.workspace(chat)
    webui.stop()
    # Open WebUI keeps the stopped call without a result, marked incomplete: it leaves such a
    # call out of the history it sends next, and with it this answer, which holds nothing else.
    stopped = webui.until("the stopped answer stored", _stopped_call(webui))
    assert stopped["name"] == "shell"

    shown = webui.ask(SECOND)

    assert "Hello, and the long job stays stopped." in shown
    messages = _model_messages(simulator)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert _text(messages[0]["content"]) == FIRST  # not merged with the new message
    (call,) = messages[1]["tool_calls"]
    assert call["function"]["name"] == "shell"
    assert messages[2]["tool_call_id"] == call["id"]
    assert _text(messages[2]["content"]).startswith("Cancelled:")
    assert _text(messages[3]["content"]) == SECOND
    assert not (workspace / "finished").exists()  # the command was stopped, not run again
    assert len(simulator.state.requests(scenario=UPSTREAM)) == 2
