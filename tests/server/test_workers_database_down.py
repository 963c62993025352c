"""``serve --workers N``: a worker started again while PostgreSQL is down says so in one line
(no traceback) and exits 75; the parent keeps the other workers serving and starts that one
again after a pause that doubles at each failed start, so it never spins, and once the database
is back the worker is. With ``migrate_on_start``, the parent migrates once for its workers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from server.cli import _database_down
from server.process.workers import _Supervisor
from server.simulator import SimulatorServer
from tests.databases import fresh_database
from tests.processes import free_port, wait_until_healthy
from tests.redis_server import redis_url_or_skip

pytestmark = pytest.mark.slow

KEY = "sk-workers-db-down-0123456789"
DOWN = "cannot reach the database (exit 75, its reason above)"


class DatabaseLink:
    """A TCP proxy to PostgreSQL that can go down (its port refusing connections, those open
    cut) and come back on the same port: the database, as a replica sees it stopped."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: down
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
async def postgres(tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def database_link(postgres: str) -> Iterator[DatabaseLink]:
    url = make_url(postgres)
    link = DatabaseLink(url.host or "127.0.0.1", url.port or 5432)
    link.up()
    yield link
    link.down()


def _through(url: str, link: DatabaseLink) -> str:
    """``url`` through ``link``."""
    return make_url(url).set(host="127.0.0.1", port=link.port).render_as_string(hide_password=False)


def _config(tmp_path: Path, simulator: SimulatorServer) -> Path:
    config = tmp_path / "hermes.yaml"
    config.write_text(
        f"""
server:
  api_keys: [{{principal: alice, key: {KEY}}}]
  data_dir: {tmp_path / "data"}
providers:
  - {{name: sim, model: db-down, base_url: "{simulator.base_url}/v1", api_mode: chat_completions}}
profiles:
  - {{id: hermes-agent, providers: [sim]}}
"""
    )
    return config


def _workers_of(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _tail(log: Path) -> str:
    return log.read_text()[-3000:]


async def _wait_for(
    what: str, check: Callable[[], bool], parent: subprocess.Popen[bytes], log: Path
) -> None:
    """Wait until ``check()`` (run off the loop: it reads the log); fail at once, with the
    log's tail, if the parent exited."""
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(check):
        if parent.poll() is not None:
            pytest.fail(f"the parent exited:\n{await asyncio.to_thread(_tail, log)}")
        if time.monotonic() > deadline:
            pytest.fail(f"never: {what}\n{await asyncio.to_thread(_tail, log)}")
        await asyncio.sleep(0.1)


@pytest.mark.postgres
async def test_a_worker_started_again_while_the_database_is_down_says_so_and_backs_off(
    simulator: SimulatorServer, tmp_path: Path, postgres: str, database_link: DatabaseLink
) -> None:
    config = _config(tmp_path, simulator)
    database = _through(postgres, database_link)
    env = {**os.environ, "DATABASE_URL": database, "REDIS_URL": redis_url_or_skip()}
    env["HERMES_MIGRATE_ON_START"] = "true"
    port, log = free_port(), tmp_path / "server.log"
    command = [sys.executable, "-m", "server.cli", "serve", "--config", str(config)]
    command += ["--workers", "2", "--port", str(port)]
    with log.open("ab") as output:
        parent = await asyncio.to_thread(
            subprocess.Popen, command, stdout=output, stderr=subprocess.STDOUT, env=env
        )
    try:
        base = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_until_healthy, base, timeout=60, process=parent)

        def started() -> int:
            return log.read_text().count("Application startup complete")

        await _wait_for("both workers serve", lambda: started() == 2, parent, log)
        database_link.down()
        os.kill(_workers_of(parent.pid)[0], signal.SIGKILL)
        await _wait_for(
            "two failed starts",
            lambda: f"{DOWN}: starting it again in 4 s" in log.read_text(),
            parent,
            log,
        )
        text = await asyncio.to_thread(log.read_text)
        assert "exited with -9: starting it again in 1 s" in text
        assert text.count(DOWN) == 2  # paused 2 s, then 4 s: no tight loop
        assert f"{DOWN}: starting it again in 2 s" in text
        assert text.count("hermes-server: server.database_url: cannot use postgresql") == 2
        # Not uvicorn's traceback of a failed start (the worker still serving may log its
        # own lost connections, as it would without workers).
        assert "Exception in 'lifespan' protocol" not in text
        assert "Application startup failed" not in text
        password = make_url(database).password
        assert not password or password not in text
        # The other worker goes on answering meanwhile.
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            models = await http.get("/v1/models", headers={"authorization": f"Bearer {KEY}"})
            assert models.status_code == 200

        database_link.up()
        await _wait_for("the worker is back", lambda: started() == 3, parent, log)
        parent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(parent.wait, 60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


@pytest.mark.postgres
async def test_workers_on_a_database_behind_with_migrate_on_start_migrate_it_once(
    simulator: SimulatorServer, tmp_path: Path, postgres: str
) -> None:
    env = {**os.environ, "DATABASE_URL": postgres, "REDIS_URL": redis_url_or_skip()}
    env["HERMES_MIGRATE_ON_START"] = "true"
    port, log = free_port(), tmp_path / "server.log"
    command = [sys.executable, "-m", "server.cli", "serve", "--config"]
    command += [str(_config(tmp_path, simulator)), "--workers", "2", "--port", str(port)]
    with log.open("ab") as output:
        parent = await asyncio.to_thread(
            subprocess.Popen, command, stdout=output, stderr=subprocess.STDOUT, env=env
        )
    try:
        # Each worker migrating at once failed all but one (a duplicate in pg_type), which
        # the parent then started again.
        await _wait_for(
            "both workers serve",
            lambda: log.read_text().count("Application startup complete") == 2,
            parent,
            log,
        )
        assert "exited with" not in await asyncio.to_thread(log.read_text)
        parent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(parent.wait, 60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


_ALWAYS_DOWN = "import sys; sys.exit(75)"


def test_a_worker_that_keeps_failing_to_start_waits_longer_each_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("ERROR", logger="hermes.workers")
    with socket.socket() as sock:
        supervisor = _Supervisor([], sock)
        supervisor._command = [sys.executable, "-c", _ALWAYS_DOWN]
        starts: list[float] = []
        real_start = supervisor.start

        def counted(index: int) -> None:
            starts.append(time.monotonic())
            real_start(index)

        supervisor.start = counted  # type: ignore[method-assign]
        supervisor.start(1)
        watching = threading.Thread(target=supervisor.watch, daemon=True)
        watching.start()
        try:
            deadline = time.monotonic() + 60
            while "starting it again in 4 s" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.05)
        finally:
            supervisor.forward(signal.SIGTERM, None)
            watching.join(timeout=30)
        assert not watching.is_alive()
        pauses = [later - earlier for earlier, later in itertools.pairwise(starts)]
        assert len(starts) == 3
        assert pauses[0] >= 1
        assert pauses[1] >= 2
        assert f"worker 1 {DOWN}: starting it again in 1 s" in caplog.text


class _Refused(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


def test_a_database_out_of_reach_is_told_from_one_refusing_the_server() -> None:
    assert _database_down(ConnectionRefusedError(111, "Connection refused"))
    assert _database_down(TimeoutError())
    assert _database_down(_Refused("57P03"))  # the database system is starting up
    assert _database_down(_Refused("08006"))  # connection failure
    assert not _database_down(_Refused("28P01"))  # password authentication failed
    assert not _database_down(_Refused("3D000"))  # no such database
