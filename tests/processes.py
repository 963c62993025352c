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

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until_healthy(base: str, *, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{base} never answered")


@contextmanager
def hermes_command(
    *args: str, port: int, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``hermes-server ARGS --port PORT`` running until the block ends (then terminated)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "--log-level", "warning", *args, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}")
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)
