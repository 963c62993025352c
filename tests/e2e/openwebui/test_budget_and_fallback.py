"""How a run that did not go to plan ends on the page: one that used up its iteration budget
says it stopped (never "Done") under the answer the model summed up with; an upstream that
fails is a status line naming the fallback, and the fallback's answer follows."""

from __future__ import annotations

from server.simulator import Fault, Scenario, SimulatorServer, Step
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.servers import FALLBACK_UPSTREAM, LIMITED_MODEL
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call


def test_a_run_that_uses_up_its_budget_says_it_stopped_under_its_summary(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    webui.open(LIMITED_MODEL)  # two model calls, then one more for the summary
    script(
        simulator,
        call("shell", command="echo one"),
        call("shell", command="echo two"),
        answer("I ran two commands before my budget ran out."),
    )

    webui.ask("Keep going")

    assert webui.answer_prose() == "I ran two commands before my budget ran out."
    assert webui.status_text() == "Stopped: The iteration budget (2) is exhausted."
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert "Done" not in statuses
    assert statuses.count("shell done") == 2


def test_a_failing_upstream_shows_the_fallback_as_a_status_line_then_its_answer(
    webui: WebUI, simulator: SimulatorServer
) -> None:
    webui.open(LIMITED_MODEL)
    script(simulator, Step(fault=Fault(status=500, message="upstream down")))
    simulator.state.script(FALLBACK_UPSTREAM, Scenario(steps=[answer("Hello from the fallback.")]))

    webui.ask("Hello")

    assert webui.answer_prose() == "Hello from the fallback."
    statuses = [s["description"] for s in webui.stored_answer()["statusHistory"]]
    assert statuses == ["sim failed (server_error); continuing on sim-fallback", "Done"]
    assert webui.stored_answer().get("error") is None
