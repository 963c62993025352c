"""``serve --workers N``: one machine's cores as N replicas behind one listening socket.

The parent binds the address once and starts N ``serve`` processes that inherit the socket
(``--listen-fd``); the kernel hands each new connection to one of them. Each worker is a full
replica — its own event loop, runs and instance name (``<instance>.w<i>``, stable across its
restarts, so a restarted worker recovers its own runs) — coordinated with the others exactly as
replicas on several machines are: one PostgreSQL, one Redis (README § Several replicas). So more
than one worker needs both; on SQLite, or without ``redis_url``, the parent refuses to start.

The parent forwards SIGTERM (each worker drains: ``server.drain_seconds``), SIGINT and SIGHUP
(each worker reloads its configuration), and starts a worker again if one dies, unless it
refused to start (exit 2: its name held by another live process, its configuration invalid):
it would refuse again at every restart, so the parent stops the others and exits 2.

A worker started again while PostgreSQL is down (refused, timed out, shutting down) says so in
one line and exits 75 (``DATABASE_DOWN``): the database may be back in seconds, so the parent
keeps the other workers serving and tries that one again later. The pause before a restart
doubles with each death soon after a start (1 s, 2 s, 4 s… up to 30 s), whatever the cause, so
a worker that cannot start never spins; one that ran a while before dying starts over at 1 s.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType

from server.config import HermesConfig

log = logging.getLogger("hermes.workers")

RESTART_PAUSE_SECONDS = 1.0
"""The pause before a dead worker is started again, doubled for each death soon after a start."""
MAX_RESTART_PAUSE_SECONDS = 30.0
STEADY_SECONDS = 30.0
"""A worker that ran this long before dying died of something new: its pause starts over."""
REFUSED = 2
"""The exit code of a worker that refused to start (``server.cli.EXIT_INVALID_CONFIG``)."""
DATABASE_DOWN = 75
"""The exit code of a worker whose database is out of reach (``server.cli.EXIT_DATABASE_DOWN``)."""


def refusal(config: HermesConfig, workers: int) -> str | None:
    """Why ``workers`` workers cannot serve ``config``, or None."""
    if workers <= 1:
        return None
    server = config.server
    if server.resolved_database_url.startswith("sqlite"):
        return (
            f"--workers {workers} needs PostgreSQL (DATABASE_URL): each worker is a replica, "
            "and replicas share one database. SQLite serves one process; use --workers 1."
        )
    if server.redis_url is None:
        return (
            f"--workers {workers} needs Redis (REDIS_URL): replicas pass stops and keep their "
            "leases through it."
        )
    return None


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def supervise(worker_args: list[str], workers: int, sock: socket.socket) -> int:
    """Run ``workers`` copies of ``hermes-server <worker_args>`` on ``sock`` until told to stop."""
    supervisor = _Supervisor(worker_args, sock)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, supervisor.forward)
    for index in range(1, workers + 1):
        supervisor.start(index)
    code = supervisor.watch()
    sock.close()
    return code


class _Supervisor:
    def __init__(self, worker_args: list[str], sock: socket.socket) -> None:
        self._sock = sock
        self._command = [
            *(sys.executable, "-m", "server.cli", *worker_args),
            *("--listen-fd", str(sock.fileno())),
        ]
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._started: dict[int, float] = {}
        """When each worker was last started (monotonic)."""
        self._pauses: dict[int, float] = {}
        """The pause before each worker's last restart."""
        self._due: dict[int, float] = {}
        """Dead workers, and when to start each again (monotonic)."""
        self._stopping = threading.Event()
        """Set by a SIGTERM or SIGINT (its handler runs between the steps of :meth:`watch`)."""

    def start(self, index: int) -> None:
        process = subprocess.Popen(
            [*self._command, "--worker", str(index)], pass_fds=(self._sock.fileno(),)
        )
        self._processes[index] = process
        self._started[index] = time.monotonic()
        log.info("worker %d started (pid %d)", index, process.pid)

    def forward(self, sig: int, frame: FrameType | None) -> None:
        """A signal for the server is a signal for each worker (SIGTERM: each drains)."""
        if sig in (signal.SIGTERM, signal.SIGINT):
            self._stopping.set()
        for process in self._processes.values():
            if process.poll() is None:
                process.send_signal(sig)

    def watch(self) -> int:
        """Start a worker that died again after its pause, until told to stop or one refused
        to start (then stop the others); then wait for them all. The parent's exit code:
        ``REFUSED`` after a refusal, else 0. One worker's pause never holds up another's."""
        refused = False
        while not self._stopping.is_set():
            time.sleep(0.2)
            for index, process in list(self._processes.items()):
                if self._stopping.is_set():  # a worker started now would never be told
                    break
                if index in self._due:
                    if time.monotonic() >= self._due[index]:
                        del self._due[index]
                        self.start(index)
                    continue
                code = process.poll()
                if code is None:
                    continue
                if code == REFUSED:
                    log.error(
                        "worker %d refused to start (exit %d, its reason above); it would "
                        "refuse again: stopping the other workers",
                        index,
                        code,
                    )
                    refused = True
                    self.forward(signal.SIGTERM, None)
                    break
                pause = self._pause_after_death(index)
                self._due[index] = time.monotonic() + pause
                if code == DATABASE_DOWN:
                    why = "cannot reach the database (exit 75, its reason above)"
                else:
                    why = f"exited with {code}"
                log.error("worker %d %s: starting it again in %g s", index, why, pause)
        for process in self._processes.values():
            process.wait()
        return REFUSED if refused else 0

    def _pause_after_death(self, index: int) -> float:
        """How long worker ``index``, just found dead, waits before it starts again: double its
        last pause when it died soon after that start, else :data:`RESTART_PAUSE_SECONDS`."""
        lived = time.monotonic() - self._started[index]
        last = self._pauses.get(index)
        if last is None or lived >= STEADY_SECONDS:
            pause = RESTART_PAUSE_SECONDS
        else:
            pause = min(last * 2, MAX_RESTART_PAUSE_SECONDS)
        self._pauses[index] = pause
        return pause


def worker_name(base: str, index: int) -> str:
    """The instance name of worker ``index`` (from 1) of the server named ``base``."""
    return f"{base}.w{index}"


def worker_instance(config: HermesConfig, base: str, index: int) -> HermesConfig:
    """``config`` as worker ``index`` serves it: its own instance name."""
    server = config.server.model_copy(update={"instance": worker_name(base, index)})
    return config.model_copy(update={"server": server})


def listening_socket(fd: int) -> socket.socket:
    """The socket the parent bound, inherited as ``fd`` (family and type read from it)."""
    sock = socket.socket(fileno=fd)
    sock.setblocking(False)
    return sock
