"""What the browser suite needs on the machine, and why it skips without it.

Kept free of Playwright imports: the default test run collects this suite on machines (CI
among them) that have neither Playwright nor a browser, and must skip it cheaply.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from hermes_core.tools.toolsets import sandbox_missing

OPENWEBUI_VERSION = "0.12.4"
"""The Open WebUI release the suite drives (``build-env`` installs it)."""
DEFAULT_VENV = Path.home() / ".cache" / "hermes-server" / f"open-webui-{OPENWEBUI_VERSION}"
CHROMIUM = Path(os.environ.get("HERMES_E2E_CHROMIUM", "/usr/bin/chromium"))
"""Debian's Chromium; Playwright drives it, and never downloads a browser of its own."""


def openwebui_venv() -> Path:
    """The virtual environment holding Open WebUI (``$OPENWEBUI_VENV``, as in the Makefile)."""
    return Path(os.environ.get("OPENWEBUI_VENV") or DEFAULT_VENV)


def openwebui_program() -> Path:
    return openwebui_venv() / "bin" / "open-webui"


def missing() -> str | None:
    """Why the browser suite cannot run here, or None."""
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "Playwright is not installed (pip install -e '.[e2e]')"
    if not openwebui_program().exists():
        return f"no Open WebUI at {openwebui_venv()} (make e2e-openwebui builds it)"
    return sandbox_missing()


def required() -> bool:
    """``make e2e-openwebui`` wants a failure, not a skip, when something is missing."""
    return os.environ.get("HERMES_REQUIRE_OPENWEBUI") == "1"


def artifacts_root(default: Path) -> Path:
    """Where screenshots and page HTML of failed tests go: ``$HERMES_E2E_ARTIFACTS``, else
    ``default`` (under pytest's temporary directory)."""
    configured = os.environ.get("HERMES_E2E_ARTIFACTS")
    return Path(configured) if configured else default
