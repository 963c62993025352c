"""A package a server does not load at start is imported, at its first use, on a worker
thread: the event loop goes on serving meanwhile."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from hermes_core.imports_off_loop import import_off_loop


async def test_a_module_not_yet_loaded_is_imported_on_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "heavy_probe.py").write_text(
        "import threading\nLOADED_ON = threading.current_thread()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "heavy_probe", raising=False)

    await import_off_loop("heavy_probe")

    loaded_on = sys.modules["heavy_probe"].LOADED_ON
    assert loaded_on is not threading.current_thread()
