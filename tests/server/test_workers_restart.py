"""``serve --workers``: a SIGTERM that comes while the parent pauses to start a dead worker
again stops the parent for good; it does not start a worker nobody then tells to stop."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from server.process.workers import _Supervisor

pytestmark = pytest.mark.slow

_DIES_ONCE = """
import pathlib, sys, time
marker = pathlib.Path(sys.argv[1])
if not marker.exists():
    marker.write_text("died once")
    sys.exit(1)
time.sleep(120)
"""


def test_a_sigterm_during_a_worker_s_restart_pause_stops_the_parent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="hermes.workers")
    with socket.socket() as sock:
        supervisor = _Supervisor([], sock)
        # A worker that dies at its first start and, started again, would run for minutes.
        supervisor._command = [sys.executable, "-c", _DIES_ONCE, str(tmp_path / "marker")]
        supervisor.start(1)
        watching = threading.Thread(target=supervisor.watch, daemon=True)
        watching.start()
        try:
            deadline = time.monotonic() + 30
            while "starting it again" not in caplog.text:  # in the pause before the restart
                assert time.monotonic() < deadline, "the worker was never seen to die"
                time.sleep(0.02)
            supervisor.forward(signal.SIGTERM, None)
            watching.join(timeout=30)
            assert not watching.is_alive(), "the parent waits for a worker it never stopped"
        finally:
            for process in supervisor._processes.values():
                if process.poll() is None:
                    process.kill()
                    process.wait()
