"""A chart the agent draws in the sandbox shows inline in the answer: the server ends the answer
with the image through a signed link, and the browser loads it without an API key."""

from __future__ import annotations

from server.simulator import SimulatorServer
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.servers import Hermes
from tests.e2e.openwebui.webui import WebUI
from tests.server.served import answer, call

PLOT = """\
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [2, 4, 3])
plt.savefig("chart.png")
print("saved")
"""


def test_a_chart_made_by_the_code_tool_is_shown_inline_and_loads(
    webui: WebUI, simulator: SimulatorServer, hermes: Hermes
) -> None:
    script(simulator, call("code", code=PLOT), answer("Here is the chart."))

    webui.ask("Plot 2, 4, 3")

    assert webui.answer_prose().startswith("Here is the chart.")
    image = webui.images()
    webui.until("the chart in the answer", lambda: image.count() == 1)
    source = image.first.get_attribute("src") or ""
    assert source.startswith(f"{hermes.base_url}/v1/workspaces/signed/")
    assert "chart.png" in source
    width = webui.until(
        "the chart loaded",
        lambda: image.first.evaluate("img => img.complete && img.naturalWidth"),
    )
    assert width > 100
    assert (hermes.workspace(webui.chat_id()) / "chart.png").exists()
