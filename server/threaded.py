"""Serve an ASGI app with uvicorn on a background thread, on a free loopback port.

Tests and benchmarks use this so that the code under test talks to real sockets: the simulator
and the agent server each get their own event loop, exactly as separate processes would.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import uvicorn
from starlette.types import ASGIApp

from server.http_limits import HttpLimits, guarded_protocol


class ThreadedServer:
    """``app`` served on ``host:port`` (port 0 picks a free one) until :meth:`stop`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        on_exit: Callable[[], None] | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self._on_exit = on_exit
        """Called when :meth:`stop` begins, as a signal would call the server's own hook."""
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=1,
            # What `serve` enforces on clients (server/http_limits.py), by default.
            http=guarded_protocol(limits if limits is not None else HttpLimits()),
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:53211``."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> Self:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError(f"server on {self.base_url} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._on_exit is not None and not self._server.should_exit:
            self._on_exit()
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
