"""A second SIGTERM cuts a drain short, and the streams it cuts still end with their
interrupted ending (a client sees why its answer stopped, not a dropped connection)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.served import sse_data
from tests.server.test_drain import AUTH, BODY, _answer, _config, _until_status

pytestmark = pytest.mark.slow


async def test_a_second_sigterm_ends_the_streams_it_cuts_with_their_interrupted_ending(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    _answer(simulator, chunks=600, delay=0.1)  # a minute of answer
    config, port = _config(tmp_path, simulator, drain_seconds=60), free_port()
    base = f"http://127.0.0.1:{port}"
    with hermes_command("serve", "--config", str(config), port=port) as server:
        async with (
            httpx.AsyncClient(verify=TLS_UNUSED, base_url=base, headers=AUTH, timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=BODY) as stream,
        ):
            lines = stream.aiter_lines()
            async for line in lines:
                if '"content":"word' in line.replace(" ", ""):
                    break
            server.send_signal(signal.SIGTERM)
            assert (await _until_status(http, "/ready", 503)).status_code == 503  # draining
            started = time.monotonic()
            server.send_signal(signal.SIGTERM)
            rest = [line async for line in lines]
        assert rest[-1] == "data: [DONE]" or rest[-2] == "data: [DONE]", rest[-3:]
        events = sse_data("\n".join(rest))
        assert events[-1]["hermes"]["exit_reason"] == "interrupted"
        assert server.wait(timeout=30) in (0, -signal.SIGTERM)
        assert time.monotonic() - started < 15  # cut short: not the drain's minute
