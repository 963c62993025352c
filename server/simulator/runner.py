"""Run the simulator on a background thread, on a free loopback port.

Tests and benchmarks use this so the simulator is a real HTTP server with its own event loop:
the code under test reaches it through real sockets, exactly as it reaches a real provider.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

import uvicorn

from server.simulator.app import create_simulator_app
from server.simulator.state import SimulatorState


class SimulatorServer:
    """The simulator app served by uvicorn on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self, state: SimulatorState | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.state = state if state is not None else SimulatorState()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(
            create_simulator_app(self.state),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def base_url(self) -> str:
        """Root URL, e.g. ``http://127.0.0.1:53211``; OpenAI clients want ``base_url + "/v1"``."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> SimulatorServer:
        self._thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout / 0.01)):
            if self._server.started:
                return self
            deadline.wait(0.01)
        raise RuntimeError("the upstream simulator did not start")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
        self._socket.close()

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
