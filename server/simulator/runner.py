"""Run the simulator on a background thread, on a free loopback port."""

from __future__ import annotations

from server.http.threaded import ThreadedServer
from server.simulator.app import create_simulator_app
from server.simulator.state import SimulatorState


class SimulatorServer(ThreadedServer):
    """The simulator app on a real socket; ``state`` scripts it and holds its recordings.

    OpenAI clients use ``base_url + "/v1"``; Anthropic clients use ``base_url`` itself.
    """

    def __init__(
        self, state: SimulatorState | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.state = state if state is not None else SimulatorState()
        super().__init__(create_simulator_app(self.state), host=host, port=port)
