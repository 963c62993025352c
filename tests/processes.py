"""``hermes-server`` commands as real processes, for the tests that need a process boundary
(conformance suites, a server killed with SIGKILL)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.plain_http import TLS_UNUSED


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_healthy(
    base: str, *, timeout: float = 30, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Return once ``base`` answers /health; fail at once if ``process`` (serving it) died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server process exited with {process.returncode}")
        try:
            if httpx.get(f"{base}/health", timeout=1, verify=TLS_UNUSED).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{base} never answered")


@contextmanager
def hermes_command(
    *args: str,
    port: int,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    wait: bool = True,
) -> Iterator[subprocess.Popen[bytes]]:
    """``hermes-server ARGS --port PORT`` running until the block ends (then terminated);
    its output goes to ``log`` when given. ``wait=False``: return at once, for a caller that
    starts several and waits for them together (:func:`wait_until_healthy`)."""
    output = log.open("ab") if log is not None else None
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "--log-level", "warning", *args, "--port", str(port)],
        stdout=output or subprocess.DEVNULL,
        stderr=subprocess.STDOUT if output else subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        if wait:
            wait_until_healthy(f"http://127.0.0.1:{port}", process=process)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # Still draining a run the test left going: a second SIGTERM skips the wait.
                process.terminate()
                process.wait(timeout=10)
        if output is not None:
            output.close()
