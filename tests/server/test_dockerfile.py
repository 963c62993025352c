"""The Dockerfile's contract: a slim image installed from the lock, a non-root user, state in a
volume, a health check on /health, ``serve --host 0.0.0.0``.

No container engine runs in CI, so the file is checked as written, and its health check command
is run for real against a live server.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from server.http.threaded import ThreadedServer

DOCKERFILE = Path(__file__).resolve().parents[2] / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    instructions = []
    for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def _all(keyword: str) -> list[str]:
    return [arguments for name, arguments in _instructions() if name == keyword]


def _health_command(port: int) -> list[str]:
    [healthcheck] = _all("HEALTHCHECK")
    command = shlex.split(healthcheck.split(" CMD ", 1)[1])
    return [sys.executable if word == "python" else word.replace(":8000/", f":{port}/")
            for word in command]  # fmt: skip


def test_the_image_is_slim_installed_from_the_lock_and_runs_as_a_non_root_user() -> None:
    [base] = _all("FROM")
    assert base.split()[0].endswith("-slim")
    assert any("pip install -c constraints.txt ." in run for run in _all("RUN"))
    [user] = _all("USER")
    assert user not in ("root", "0")
    assert any(
        f"useradd --system --uid 10001 --home-dir /data {user}" in run for run in _all("RUN")
    )


def test_the_image_serves_on_every_interface_with_its_state_in_a_volume() -> None:
    assert json.loads(_all("ENTRYPOINT")[0]) == ["hermes-server"]
    command = json.loads(_all("CMD")[0])
    assert command[0] == "serve"
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert _all("EXPOSE") == [command[command.index("--port") + 1]]
    assert json.loads(_all("VOLUME")[0]) == ["/data"]
    assert any("HERMES_DATA_DIR=/data" in env for env in _all("ENV"))


def test_the_health_check_passes_against_a_live_server_and_fails_without_one(
    hermes: ThreadedServer,
) -> None:
    live = subprocess.run(_health_command(hermes.port), capture_output=True, timeout=10)
    assert live.returncode == 0, live.stderr
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    down = subprocess.run(_health_command(closed_port), capture_output=True, timeout=10)
    assert down.returncode != 0


def test_the_image_has_bubblewrap_for_the_command_sandbox() -> None:
    assert any("apt-get install" in run and "bubblewrap" in run for run in _all("RUN"))
