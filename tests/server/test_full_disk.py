"""A full data disk, for real: a ``hermes-server serve`` process whose data directory is a
small tmpfs. When the disk fills, a turn fails with a clear 507 ``insufficient_storage`` (not a
500, not a hang); once space is freed, the same session's next turn works (no turn lock was
left behind) and no run is left ``running``. The same holds when the disk fills while a run is
in progress: the run ends, and what it could not record waits for space instead of being lost."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import answer, http_client, pid_alive, until

pytestmark = pytest.mark.slow

KEY = "sk-full-disk-0123456789"
MODEL = "disk-agent"
SLOW_MODEL = "slow-disk-agent"
SLOW_UPSTREAM = "full-disk-slow-upstream"
"""Scripted per test: a model call slow enough to fill the disk while it is in progress."""
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
  - name: slow-sim
    model: {slow_upstream}
    api_mode: chat_completions
    base_url: {simulator}/v1
    api_key: upstream-key
profiles:
  - id: {model}
    providers: [sim]
  - id: {slow_model}
    providers: [slow-sim]
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
    home = tmp_path_factory.mktemp("full-disk")
    with _tmpfs(home / "data"), _serve(home, _simulator_server) as (disk, _process):
        yield disk


@contextlib.contextmanager
def _tmpfs(data: Path) -> Iterator[None]:
    """``data``, a small disk of its own while the block runs."""
    if not _can_mount():
        pytest.skip("mounting a tmpfs needs root")
    data.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(data)], check=True
    )
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


@contextlib.contextmanager
def _serve(
    home: Path, simulator: SimulatorServer
) -> Iterator[tuple[SmallDisk, subprocess.Popen[bytes]]]:
    """A server whose data directory is ``home/data`` (its log: ``home/server.log``)."""
    data, config = home / "data", home / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            simulator=simulator.base_url,
            model=MODEL,
            slow_model=SLOW_MODEL,
            slow_upstream=SLOW_UPSTREAM,
        )
    )
    port, log = free_port(), home / "server.log"
    with hermes_command("serve", "--config", str(config), port=port, log=log) as process:
        yield SmallDisk(f"http://127.0.0.1:{port}", data, process.pid, log), process


def _can_mount() -> bool:
    return os.geteuid() == 0


@pytest.fixture
async def http(small_disk: SmallDisk) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(small_disk.base_url, KEY) as client:
        yield client


async def turn(
    http: httpx.AsyncClient, session: str, text: str, *, model: str = MODEL
) -> httpx.Response:
    return await http.post(
        "/v1/chat/completions",
        headers={"x-hermes-session-id": session},
        json={"model": model, "messages": [{"role": "user", "content": text}]},
        timeout=60,
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


async def test_a_disk_that_fills_mid_run_ends_the_run_and_the_session_goes_on_once_freed(
    small_disk: SmallDisk, http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    session = f"mid-run-{uuid.uuid4().hex[:8]}"
    run_id, filler = await _fill_mid_run(http, simulator, small_disk, session)
    try:
        run = await http.get(f"/v1/runs/{run_id}")
        assert run.status_code == 200, run.text
        assert run.json()["status"] != "running"
        # Its record waits for space, lock release included: the session is full, not busy.
        waiting = await turn(http, session, "are you there?", model=SLOW_MODEL)
        assert waiting.status_code == 507, waiting.text
    finally:
        filler.unlink()

    again = await turn(http, session, "and now?", model=SLOW_MODEL)
    assert again.status_code == 200, again.text
    assert again.json()["choices"][0]["message"]["content"] == "still here"
    assert _stored_status(small_disk, run_id) not in (None, "running")


async def test_writes_waiting_for_space_at_shutdown_are_logged_and_closed_at_the_next_start(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    session = f"shutdown-{uuid.uuid4().hex[:8]}"
    with _tmpfs(tmp_path / "data"):
        with _serve(tmp_path, simulator) as (disk, process):
            async with http_client(disk.base_url, KEY) as http:
                run_id, filler = await _fill_mid_run(http, simulator, disk, session)
            process.terminate()
            process.wait(timeout=30)
        assert "writes are lost (" in disk.log.read_text()
        filler.unlink()
        with _serve(tmp_path, simulator) as (disk, _process):
            async with http_client(disk.base_url, KEY) as http:
                run = await http.get(f"/v1/runs/{run_id}")
                assert run.status_code == 200, run.text
                assert run.json()["status"] == "interrupted"  # crash recovery closed it
                again = await turn(http, session, "and now?", model=SLOW_MODEL)
                assert again.status_code == 200, again.text


async def _fill_mid_run(
    http: httpx.AsyncClient, simulator: SimulatorServer, disk: SmallDisk, session: str
) -> tuple[str, Path]:
    """A turn of ``session`` whose model thinks for a while, then answers more than any free
    page can take; the disk is filled while it thinks. Returns the run's id once the turn was
    answered (not hanging), and the file to free the disk with."""
    slow = Step(reply=Reply(text="y" * 2_000_000), fault=Fault(first_byte_delay=3))
    simulator.state.script(SLOW_UPSTREAM, Scenario(steps=[slow, answer("still here")]))
    in_progress = asyncio.create_task(turn(http, session, "think hard", model=SLOW_MODEL))

    def model_called() -> bool:
        return bool(simulator.state.requests(scenario=SLOW_UPSTREAM))

    assert await until(model_called, server=disk)
    filler = disk.fill()
    try:
        ended = await asyncio.wait_for(in_progress, timeout=60)
        assert ended.status_code in (200, 507), ended.text
    except BaseException:
        filler.unlink()
        raise
    return ended.headers["x-hermes-run-id"], filler


def _stored_status(disk: SmallDisk, run_id: str) -> str | None:
    """The run's status as the database holds it (what a restarted server would say)."""
    uri = f"file:{disk.data_dir / 'hermes.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        row = db.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else str(row[0])
