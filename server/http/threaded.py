"""Serve an ASGI app with uvicorn on a background thread, on a free loopback port.

Tests and benchmarks use this so that the code under test talks to real sockets: the simulator
and the agent server each get their own event loop, exactly as separate processes would.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import uvicorn
from starlette.types import ASGIApp

from server.http.connection_limits import HttpLimits, guarded_protocol


class _PromptServer(uvicorn.Server):
    """uvicorn's server, which starts its exit as soon as it is told to rather than at its next
    0.1 s tick: the tests start and stop hundreds of servers."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)  # uvicorn's tick
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, less its 0.1 s wait for connections to finish when there are
        none: tests close their clients before their servers, and stop hundreds of them."""
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown(sockets)
            return
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()

    def wake(self) -> None:
        """From another thread: look at ``should_exit`` now."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)


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
            # What `serve` enforces on clients (server/http/connection_limits.py), by default.
            http=guarded_protocol(limits if limits is not None else HttpLimits()),
        )
        self._server = _PromptServer(config)
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
        self._server.wake()
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
