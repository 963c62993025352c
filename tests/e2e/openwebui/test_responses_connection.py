"""A Responses-mode connection (``api_type: responses``): two turns with a tool call; the
second turn's model call carries the first turn's whole context, the tool call included."""

from __future__ import annotations

import json

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import RESPONSES_MODEL, UPSTREAM, script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call


def test_a_responses_connection_keeps_the_first_turns_tool_call_in_the_second_turns_context(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    webui.open(RESPONSES_MODEL)
    script(
        simulator,
        call("shell", command="echo the-secret-is-42"),
        answer("The command printed the secret."),
        answer("It was 42."),
    )

    webui.ask("Run a command that prints a secret")
    assert webui.answer_prose() == "The command printed the secret."
    assert webui.tool_cards("shell").count() == 1
    assert "View Result from shell" in webui.tool_cards("shell").first.inner_text()

    webui.ask("What was the secret?")
    assert webui.answer_prose() == "It was 42."

    calls = simulator.state.requests(scenario=UPSTREAM)
    assert len(calls) == 3
    messages = [m for m in calls[-1].body["messages"] if m["role"] != "system"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert "Run a command that prints a secret" in json.dumps(messages[0])
    assert "echo the-secret-is-42" in json.dumps(messages[1]["tool_calls"])
    assert "the-secret-is-42" in json.dumps(messages[2]["content"])
    assert "The command printed the secret." in json.dumps(messages[3])
    assert "What was the secret?" in json.dumps(messages[4])
    stored = [m for m in webui.stored_messages() if m["role"] == "assistant"]
    assert len(stored) == 2
    assert all(m["model"] == RESPONSES_MODEL for m in stored)
