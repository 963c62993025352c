"""A full data disk, for real: a ``hermes-server serve`` process whose data directory is a
small tmpfs. When the disk fills, a turn fails with a clear 507 ``insufficient_storage`` (not a
500, not a hang); once space is freed, the same session's next turn works (no turn lock was
left behind) and no run is left ``running``."""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.processes import free_port, hermes_command
from tests.server.served import http_client, pid_alive, until

pytestmark = pytest.mark.slow

KEY = "sk-full-disk-0123456789"
MODEL = "disk-agent"
DISK_MB = 48

CONFIG = """\
server:
  data_dir: {data}
  api_keys:
    - {{key: {key}, principal: carol}}
providers:
  - name: sim
    model: full-disk-upstream
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
"""


@dataclass(frozen=True, slots=True)
class SmallDisk:
    base_url: str
    data_dir: Path
    pid: int
    log: Path

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def fill(self) -> Path:
        """Write a file until the disk refuses more; the file, to free the space with."""
        filler = self.data_dir / "filler"
        descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            for size in (1024 * 1024, 65536, 4096, 512, 1):
                block = b"\0" * size
                try:
                    while os.write(descriptor, block):
                        pass
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(descriptor)
        return filler


@pytest.fixture(scope="module")
def small_disk(
    _simulator_server: SimulatorServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SmallDisk]:
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root")
    home = tmp_path_factory.mktemp("full-disk")
    data = home / "data"
    data.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(data)], check=True
    )
    try:
        config = home / "hermes.yaml"
        config.write_text(
            CONFIG.format(data=data, key=KEY, simulator=_simulator_server.base_url, model=MODEL)
        )
        port, log = free_port(), home / "server.log"
        with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
            yield SmallDisk(f"http://127.0.0.1:{port}", data, process.pid, log)
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


def _can_mount() -> bool:
    return os.geteuid() == 0


@pytest.fixture
async def http(small_disk: SmallDisk) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(small_disk.base_url, KEY) as client:
        yield client


async def turn(http: httpx.AsyncClient, session: str, text: str) -> httpx.Response:
    return await http.post(
        "/v1/chat/completions",
        headers={"x-hermes-session-id": session},
        json={"model": MODEL, "messages": [{"role": "user", "content": text}]},
        timeout=30,
    )


async def test_a_full_disk_is_a_507_and_the_session_goes_on_once_space_is_freed(
    small_disk: SmallDisk, http: httpx.AsyncClient
) -> None:
    session = f"disk-{uuid.uuid4().hex[:8]}"
    assert (await turn(http, session, "hello")).status_code == 200
    filler = small_disk.fill()
    try:
        # Big enough that no page the database already holds can take it.
        failed = await turn(http, session, "remember this: " + "x" * 2_000_000)
        assert failed.status_code == 507, failed.text
        error = failed.json()["error"]
        assert error["code"] == "insufficient_storage"
        assert "disk" in error["message"]
    finally:
        filler.unlink()
    again = await turn(http, session, "and now?")
    assert again.status_code == 200, again.text
    run_id = failed.headers.get("x-hermes-run-id")
    if run_id:

        async def ended() -> bool:
            run = await http.get(f"/v1/runs/{run_id}")
            return run.status_code == 200 and run.json()["status"] != "running"

        assert await until(ended, server=small_disk, seconds=30)
