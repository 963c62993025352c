"""A sub-agent and a retry as Open WebUI shows them (issue #26, point 6): a ``delegate_task``
card is labelled with the sub-agent's task and the sub-agent's steps are status lines; a retry
of the upstream model is one status line, never also a line of a Thought block."""

from __future__ import annotations

import json
from typing import Any

from server.simulator import Fault, SimulatorServer, Step
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call

TASK = "Count the owls in the park"


def status_history(webui: WebUI) -> list[str]:
    """Every status line of the last answer as the page shows them: the line is clicked open
    into its history when the answer has more than one."""
    lines = webui.last_answer().locator(".status-description")
    stored = webui.stored_answer().get("statusHistory") or []
    if len(stored) > 1 and lines.count() < 2:
        lines.first.click()
        webui.until("the status history expanded", lambda: lines.count() > 1)
    shown: list[str] = lines.all_inner_texts()
    return [line.strip() for line in shown]


def stored_statuses(answer: dict[str, Any]) -> list[str]:
    return [s["description"] for s in answer.get("statusHistory") or []]


def test_a_delegate_task_card_reads_the_sub_agents_task_and_its_steps_are_status_lines(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(
        simulator,
        call("delegate_task", goal=TASK, context="The park is the one by the river."),
        call("shell", command="echo 7 owls"),  # the sub-agent's step
        answer("Seven owls."),  # the sub-agent's answer
        answer("There are seven owls in the park."),
    )

    webui.ask("How many owls are in the park?")

    assert webui.answer_prose() == "There are seven owls in the park."
    cards = webui.tool_cards()
    assert cards.count() == 1  # the sub-agent's shell call is no card of its own
    label = cards.first.inner_text()
    assert f'Sub-agent: "{TASK}"' in label
    assert '"?"' not in label
    stored = webui.stored_answer()
    (card,) = [i for i in stored["output"] if i["type"] == "function_call"]
    assert card["name"] == "delegate_task"
    assert json.loads(card["arguments"])["task"] == TASK
    sub_agent_steps = ["↳ [1] shell echo 7 owls", "↳ [1] shell done"]
    statuses = stored_statuses(stored)
    assert all(step in statuses for step in sub_agent_steps), statuses
    shown = status_history(webui)
    assert all(step in shown for step in sub_agent_steps), shown
    # The sub-agent was given its task, and asked the same upstream model.
    sub_agent_prompt = simulator.state.requests()[1].body["messages"][-1]["content"]
    assert TASK in str(sub_agent_prompt)


def test_a_retry_shows_once_as_a_status_line_and_not_in_a_thought_block(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    script(simulator, Step(fault=Fault(status=500)), answer("Hello after a retry."))

    webui.ask("Hello")

    assert webui.answer_prose() == "Hello after a retry."
    stored = webui.stored_answer()
    # The model gave no reasoning: no Thought block at all, so the retry is not in one.
    assert "Thought" not in webui.answer_text()
    assert "retrying" not in webui.answer_text()
    assert [i["type"] for i in stored["output"]] == ["message"]
    retries = [s for s in stored_statuses(stored) if "retrying" in s]
    assert len(retries) == 1, stored_statuses(stored)
    shown = status_history(webui)
    assert [line for line in shown if "retrying" in line] == retries
    assert len(simulator.state.requests()) == 2  # the failed call and the one that answered
