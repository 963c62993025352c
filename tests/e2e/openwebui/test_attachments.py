"""A file attached in Open WebUI's page reaches the agent's workspace through the filter function
``deploy/openwebui/hermes_attachments.py``, installed as its README says (through Open WebUI's
API, enabled on the hermes models): the agent's command reads the file's own bytes, on a Chat
Completions and on a Responses connection; the file stays for later turns, and a regenerated
answer has it, without a second copy; the filter's uploads are deleted after the answer; and a
file the filter cannot place is said in the chat while the turn goes on."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import MODEL, RESPONSES_MODEL, UPSTREAM, script
from tests.e2e.openwebui.servers import KEY, Hermes, Process
from tests.e2e.openwebui.webui import WebUI
from tests.processes import free_port

FILTER = Path(__file__).parents[3] / "deploy" / "openwebui" / "hermes_attachments.py"
FILTER_ID = "hermes_attachments"
CSV = b"region,total\nnorth,12\nsouth,30\n"
READ_WITH_PANDAS = (
    "python3 -c \"import pandas as pd; d = pd.read_csv('{name}'); "
    "print('rows', len(d), 'total', d.total.sum())\""
)


class OpenWebUIAdmin:
    """Open WebUI's API as its admin (the only user, without login)."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60)
        signed_in = self.http.post(
            "/api/v1/auths/signin", json={"email": "admin@localhost", "password": "admin"}
        )
        signed_in.raise_for_status()
        self.http.headers["authorization"] = f"Bearer {signed_in.json()['token']}"

    def post(self, path: str, body: dict[str, Any]) -> Any:
        response = self.http.post(path, json=body)
        assert response.is_success, f"POST {path}: {response.status_code} {response.text[:500]}"
        return response.json()

    def set_valves(self, **valves: Any) -> None:
        self.post(f"/api/v1/functions/id/{FILTER_ID}/valves/update", valves)


@pytest.fixture(scope="module")
def admin(openwebui_server: Process) -> Iterator[OpenWebUIAdmin]:
    """The filter installed as the README says: created, enabled, and turned on for the two
    hermes models (not globally: it takes every attachment away from Open WebUI's retrieval).
    Removed again after this module, so the suite's other tests see a plain Open WebUI."""
    admin = OpenWebUIAdmin(openwebui_server.base_url)
    admin.post(
        "/api/v1/functions/create",
        {
            "id": FILTER_ID,
            "name": "hermes-server attachments",
            "content": FILTER.read_text(),
            "meta": {"description": "Attached files into the agent's workspace"},
        },
    )
    assert admin.post(f"/api/v1/functions/id/{FILTER_ID}/toggle", {})["is_active"]
    for model in (MODEL, RESPONSES_MODEL):
        admin.post(
            "/api/v1/models/create",
            {"id": model, "name": model, "meta": {"filterIds": [FILTER_ID]}, "params": {}},
        )
    try:
        yield admin
    finally:
        for model in (MODEL, RESPONSES_MODEL):
            admin.http.post("/api/v1/models/model/delete", json={"id": model})
        admin.http.delete(f"/api/v1/functions/id/{FILTER_ID}/delete")
        admin.http.close()


@pytest.fixture
def sales_csv(tmp_path: Path) -> Path:
    """A CSV with a name of its own, so the server's file list tells this test's uploads."""
    path = tmp_path / f"sales-{uuid.uuid4().hex[:8]}.csv"
    path.write_bytes(CSV)
    return path


def shell(command: str) -> Step:
    return Step(
        reply=Reply(tool_calls=[ToolCallSpec(name="shell", arguments={"command": command})])
    )


def says(text: str) -> Step:
    return Step(reply=Reply(text=text))


def last_tool_output(webui: WebUI) -> str:
    """The output of the last answer's last tool call, as Open WebUI stored it."""
    outputs = [
        item
        for item in webui.stored_answer().get("output") or []
        if item.get("type") == "function_call_output"
    ]
    assert outputs, "the stored answer has no tool output"
    output = outputs[-1]["output"]
    return output if isinstance(output, str) else "".join(p.get("text", "") for p in output)


def card_shows(webui: WebUI, text: str) -> bool:
    """Whether the last answer's shell card, opened, shows ``text``."""
    card = webui.last_answer().get_by_text("View Result from shell").last
    if text not in webui.last_answer().inner_text():
        card.click()
    return text in webui.last_answer().inner_text()


def placed_uploads(workspace: Path) -> dict[str, str]:
    """The uploads the server placed in ``workspace``, and where (its manifest, beside it)."""
    placed: dict[str, str] = json.loads(
        (workspace.parent / f"{workspace.name}.uploads.json").read_text()
    )
    return placed


def uploads_named(hermes: Hermes, name: str) -> int:
    files = httpx.get(
        f"{hermes.base_url}/v1/files", headers={"authorization": f"Bearer {KEY}"}
    ).json()
    return sum(1 for file in files["data"] if file["filename"] == name)


def model_saw(simulator: SimulatorServer) -> str:
    """The text of the user's last message in the model's last request."""
    messages = simulator.state.requests(scenario=UPSTREAM)[-1].body["messages"]
    content: Any = next(m for m in reversed(messages) if m["role"] == "user")["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@pytest.mark.parametrize("model", [MODEL, RESPONSES_MODEL], ids=["chat", "responses"])
def test_a_csv_attached_in_the_page_is_read_by_the_agents_command(
    admin: OpenWebUIAdmin,
    webui: WebUI,
    simulator: SimulatorServer,
    hermes: Hermes,
    sales_csv: Path,
    model: str,
) -> None:
    if model != MODEL:
        webui.open(model)
    script(simulator, shell(READ_WITH_PANDAS.format(name=sales_csv.name)), says("42 in all."))
    webui.attach(sales_csv)

    shown = webui.ask("Add up the totals in the file.")

    assert "42 in all." in shown
    assert "rows 2 total 42" in last_tool_output(webui)
    webui.until("the command's output in the shell card", lambda: card_shows(webui, "total 42"))
    assert (hermes.workspace(webui.chat_id()) / sales_csv.name).read_bytes() == CSV
    assert f"it is in your workspace at {sales_csv.name}" in model_saw(simulator)
    assert "<source" not in model_saw(simulator)  # Open WebUI's retrieval stayed out


def test_a_file_attached_in_the_first_turn_is_there_in_the_third_uploaded_once_then_deleted(
    admin: OpenWebUIAdmin,
    webui: WebUI,
    simulator: SimulatorServer,
    hermes: Hermes,
    sales_csv: Path,
) -> None:
    script(
        simulator,
        says("Got it."),
        says("Still here."),
        shell(f"cat {sales_csv.name}"),
        says("It is there."),
    )
    webui.attach(sales_csv)
    webui.ask("Keep this file.")
    webui.ask("Anything else?")

    webui.ask("Show me the file.")

    assert "south,30" in last_tool_output(webui)
    workspace = hermes.workspace(webui.chat_id())
    assert sorted(p.name for p in workspace.iterdir()) == [sales_csv.name]
    assert list(placed_uploads(workspace).values()) == [sales_csv.name]  # uploaded once
    webui.until("the upload deleted", lambda: uploads_named(hermes, sales_csv.name) == 0)


def test_a_file_the_filter_cannot_place_is_said_and_the_turn_goes_on(
    admin: OpenWebUIAdmin,
    webui: WebUI,
    simulator: SimulatorServer,
    hermes: Hermes,
    sales_csv: Path,
) -> None:
    admin.set_valves(base_url=f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    try:
        script(simulator, says("I cannot see that file."))
        webui.attach(sales_csv)

        shown = webui.ask("Read the file.")
    finally:
        admin.set_valves(base_url="")

    assert "I cannot see that file." in shown
    seen = model_saw(simulator)
    assert f"The user attached {sales_csv.name}, but it could not be put in your workspace" in seen
    assert "hermes-server could not be reached" in seen
    assert not (hermes.workspace(webui.chat_id()) / sales_csv.name).exists()


def test_a_regenerated_answer_has_the_file_without_a_second_copy(
    admin: OpenWebUIAdmin,
    webui: WebUI,
    simulator: SimulatorServer,
    hermes: Hermes,
    sales_csv: Path,
) -> None:
    script(simulator, says("First answer."), says("Second answer."))
    webui.attach(sales_csv)
    webui.ask("Keep this file.")

    webui.page.locator('button[aria-label="Regenerate"]').last.click()
    webui.page.get_by_text("Try Again", exact=True).click()

    webui.until("the regenerated answer", lambda: "Second answer." in webui.answer_text())
    webui.wait_turn_end()
    assert f"it is in your workspace at {sales_csv.name}" in model_saw(simulator)
    workspace = hermes.workspace(webui.chat_id())
    assert sorted(p.name for p in workspace.iterdir()) == [sales_csv.name]
    assert set(placed_uploads(workspace).values()) == {sales_csv.name}
    webui.until("the uploads deleted", lambda: uploads_named(hermes, sales_csv.name) == 0)
