"""Two people signed in to one Open WebUI, one API key behind them: each is an end user of
their own (docs/end-users.md). What one tells the agent to remember reaches that person's next
chats and never the other's, as the browser shows and the upstream is asked.

This module runs its own Open WebUI with logins on (the package's runs without any): an admin
signs up, adds a second user, and each gets a browser context of their own, signed in by the
token Open WebUI's page keeps in local storage.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from server.simulator import Reply, SimulatorServer, Step, ToolCallSpec
from tests.e2e.openwebui.conftest import script
from tests.e2e.openwebui.servers import UPSTREAM, Hermes, Process, running_openwebui
from tests.e2e.openwebui.webui import WebUI

if TYPE_CHECKING:
    from playwright.sync_api import Browser

PASSWORD = "Two-users-e2e-9-passphrase"


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    user_id: str
    token: str


@dataclass(frozen=True, slots=True)
class SignedIn:
    server: Process
    ann: Account
    ben: Account


@pytest.fixture(scope="module")
def signed_in(hermes: Hermes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedIn]:
    """Open WebUI with logins: Ann signed up first (its admin), Ben added by her."""
    data = tmp_path_factory.mktemp("openwebui-accounts")
    extra = {"WEBUI_AUTH": "True", "BYPASS_MODEL_ACCESS_CONTROL": "True"}
    with running_openwebui(data, hermes.base_url, extra) as server:
        with httpx.Client(base_url=server.base_url, timeout=60) as http:
            ann = _account(
                http.post(
                    "/api/v1/auths/signup",
                    json={"name": "Ann", "email": "ann@example.com", "password": PASSWORD},
                )
            )
            added = http.post(
                "/api/v1/auths/add",
                headers={"authorization": f"Bearer {ann.token}"},
                json={
                    "name": "Ben",
                    "email": "ben@example.com",
                    "password": PASSWORD,
                    "role": "user",
                },
            )
            assert added.status_code == 200, added.text
            ben = _account(
                http.post(
                    "/api/v1/auths/signin",
                    json={"email": "ben@example.com", "password": PASSWORD},
                )
            )
        yield SignedIn(server, ann, ben)


def _account(response: httpx.Response) -> Account:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return Account(name=str(body["name"]), user_id=str(body["id"]), token=str(body["token"]))


@pytest.fixture
def as_user(
    browser: Browser,
    signed_in: SignedIn,
    hermes: Hermes,
    _artifacts: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    """``as_user(account)``: a new chat in a browser context signed in as ``account``."""
    contexts = []

    def open_as(account: Account) -> WebUI:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        contexts.append(context)
        context.add_init_script(f"localStorage.setItem('token', {json.dumps(account.token)})")
        name = re.sub(r"[^\w.-]+", "_", f"{request.node.nodeid}-{account.name}")
        ui = WebUI(
            context.new_page(),
            signed_in.server.base_url,
            watched=(hermes, signed_in.server),
            artifacts=_artifacts / name,
        )
        ui.open()
        return ui

    try:
        yield open_as
    finally:
        for context in contexts:
            context.close()


def _memory_owners(hermes: Hermes, entry: str) -> list[str]:
    """Whose memory holds ``entry``, as the server's database says."""
    uri = f"file:{hermes.data_dir / 'hermes.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute("SELECT scope, entries FROM memory").fetchall()
    return sorted(scope for scope, entries in rows if entry in entries)


def _system_prompt(body: dict[str, Any]) -> str:
    return "\n".join(
        str(m.get("content")) for m in body["messages"] if m.get("role") in ("system", "developer")
    )


def test_what_one_user_has_remembered_reaches_only_their_own_next_chat(
    signed_in: SignedIn, as_user: Any, simulator: SimulatorServer, hermes: Hermes
) -> None:
    remember = ToolCallSpec(
        name="memory",
        arguments={"action": "add", "target": "user", "content": "Favourite colour: green"},
    )
    script(
        simulator,
        Step(reply=Reply(tool_calls=[remember])),
        Step(reply=Reply(text="Noted: green.")),
        Step(reply=Reply(text="I do not know your favourite colour.")),
        Step(reply=Reply(text="Your favourite colour is green.")),
    )
    ann = as_user(signed_in.ann)
    assert "Noted: green." in ann.ask("Remember that my favourite colour is green.")

    ben = as_user(signed_in.ben)
    assert "I do not know" in ben.ask("What is my favourite colour?")

    ann_again = as_user(signed_in.ann)  # a new chat: a new session, its prompt made afresh
    assert "green" in ann_again.ask("What is my favourite colour?")

    asked = simulator.state.requests(scenario=UPSTREAM)
    assert len(asked) == 4, [r.body["messages"][-1] for r in asked]
    assert "green" not in _system_prompt(asked[2].body)  # Ben's chat
    assert "Favourite colour: green" in _system_prompt(asked[3].body)  # Ann's next chat
    # Open WebUI named each person to the server, which kept what Ann said under her id.
    assert _memory_owners(hermes, "Favourite colour: green") == [f"webui/{signed_in.ann.user_id}"]
