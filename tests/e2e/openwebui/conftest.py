"""The browser suite's fixtures: the simulator (the root conftest's), one ``hermes-server
serve`` process with the files, shell and code tools, one Open WebUI with a Chat Completions
and a Responses connection to it, one headless Chromium; and for each test a fresh page at a
new chat (``webui``).

Every test in this directory is marked ``openwebui`` and ``slow``, and skipped — before any
fixture starts — unless Chromium, Playwright and the Open WebUI environment are all there
(``make e2e-openwebui`` provides them, and turns a skip into a failure). Playwright is imported
only once a test runs, so collecting the suite costs nothing where it is missing. A failed test
leaves a screenshot and the page's HTML, whose paths are printed with the failure.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from server.simulator import Scenario, SimulatorServer, Step
from tests.e2e.openwebui import environment
from tests.e2e.openwebui.servers import (
    MODEL,
    RESPONSES_MODEL,
    UPSTREAM,
    Hermes,
    Process,
    hermes_config,
    running_openwebui,
    tail,
)
from tests.e2e.openwebui.webui import WebUI
from tests.processes import free_port, hermes_command

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

__all__ = ["MODEL", "RESPONSES_MODEL", "UPSTREAM", "script"]

HERE = Path(__file__).parent
BROWSER_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this directory's tests (so ``-m openwebui`` selects them and ``make fast`` leaves
    them out), and skip them where the browser, Playwright or Open WebUI is missing."""
    mine = [item for item in items if HERE in item.path.parents]
    if not mine:
        return
    reason = environment.missing()
    if reason is not None and environment.required():
        raise pytest.UsageError(f"the Open WebUI browser suite cannot run: {reason}")
    for item in mine:
        item.add_marker(pytest.mark.openwebui)
        item.add_marker(pytest.mark.slow)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def script(simulator: SimulatorServer, *steps: Step) -> None:
    """What the upstream model answers to the server's next model calls, in order."""
    simulator.state.script(UPSTREAM, Scenario(steps=list(steps)))


@pytest.fixture(scope="package")
def hermes(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hermes]:
    """``hermes-server serve`` with the files, shell and code tools, in front of the simulator
    (scripted under ``UPSTREAM``); dangerous commands ask for approval."""
    data = tmp_path_factory.mktemp("hermes")
    config = data / "hermes.yaml"
    config.write_text(hermes_config(data, _simulator_server.base_url))
    port, log = free_port(), data / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
        yield Hermes("hermes-server", f"http://127.0.0.1:{port}", process.pid, log, data)


@pytest.fixture(scope="package")
def openwebui_server(hermes: Hermes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    """Open WebUI, logged in as its single admin, with two connections to ``hermes``: Chat
    Completions (model ``MODEL``) and Responses (``RESPONSES_MODEL``)."""
    with running_openwebui(tmp_path_factory.mktemp("openwebui"), hermes.base_url) as served:
        yield served


@pytest.fixture(scope="package")
def _playwright() -> Iterator[Playwright]:
    # Package scope, not session: Playwright's synchronous API keeps an event loop of its own
    # on this thread, which must be gone before other suites' asyncio tests run.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="package")
def browser(_playwright: Playwright) -> Iterator[Browser]:
    """Debian's headless Chromium (never a browser Playwright downloaded)."""
    launched = _playwright.chromium.launch(
        executable_path=str(environment.CHROMIUM), args=BROWSER_FLAGS
    )
    yield launched
    launched.close()


@pytest.fixture
def webui(
    browser: Browser,
    openwebui_server: Process,
    hermes: Hermes,
    simulator: SimulatorServer,
    _artifacts: Path,
    request: pytest.FixtureRequest,
) -> Iterator[WebUI]:
    """A fresh browser context at a new chat with ``MODEL`` (the simulator reset: script it
    with :func:`script`)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        page = context.new_page()
        ui = WebUI(
            page,
            openwebui_server.base_url,
            watched=(hermes, openwebui_server),
            artifacts=_artifacts / re.sub(r"[^\w.-]+", "_", request.node.nodeid),
        )
        ui.open()
        yield ui
    finally:
        context.close()


@pytest.fixture(scope="session")
def _artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return environment.artifacts_root(tmp_path_factory.getbasetemp() / "openwebui-artifacts")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On a failure, save the page's screenshot and HTML, and add their paths and the
    processes' log tails to the report."""
    report = yield
    if not report.failed or not isinstance(item, pytest.Function):
        return report
    ui = item.funcargs.get("webui")
    lines = []
    if isinstance(ui, WebUI):
        lines += ui.save_artifacts()
    for name in ("hermes", "openwebui_server"):
        process = item.funcargs.get(name)
        if isinstance(process, Process):
            lines.append(f"--- {process.name} log, {process.log}:\n{tail(process.log, 25)}")
    if lines:
        report.sections.append(("Open WebUI suite", "\n".join(lines)))
    return report
