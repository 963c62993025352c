"""What a finished run leaves behind in the serving process: its events and its record, never
its request or its transcript (the server keeps up to a thousand finished runs)."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hermes_core.context import CachingContext, CompressingContext, Compressor
from hermes_core.persistence import sqlite_url
from server.app import create_app
from server.http.threaded import ThreadedServer
from server.services import Services
from server.simulator import Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE, UPSTREAM_MODEL, make_services

REPO = Path(__file__).parents[2]
MESSAGE_CHARS = 2_000_000
PASTED_WORD = "0123456789abcdef" * 8 + " "
"""The paste is made of long words: the server splits a message into its words (for its title,
for search), and every allocation is traced with 64 frames, so 285,000 short words cost
seconds of CPU where 15,000 long ones cost a tenth of it; the bytes kept are what is measured."""
RETAINED_BOUND = 200_000
"""Bytes a finished 2 MB request may leave allocated: a tenth of it (its events are ~3 KB)."""


@pytest.fixture
def served(simulator: SimulatorServer, tmp_path: Path) -> Iterator[tuple[ThreadedServer, Services]]:
    """A server whose profile manages its context as configured profiles do (compression
    hooks that remember each session between calls), with room for a 2 MB message."""
    services = make_services(
        simulator,
        database_url=sqlite_url(tmp_path / "hermes.db"),
        context=CachingContext(inner=CompressingContext(Compressor(None))),
        context_window=10_000_000,  # no compression: the message stays whole all along
        max_body_bytes=8 * 1024 * 1024,
    )
    with ThreadedServer(create_app(services)) as server:
        yield server, services


def _server_side(snapshot: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    """Allocations made by the server's code (not the simulator's recordings, not the test's
    client)."""
    return snapshot.filter_traces(
        [
            tracemalloc.Filter(True, str(REPO / "server" / "*"), all_frames=True),
            tracemalloc.Filter(True, str(REPO / "hermes_core" / "*"), all_frames=True),
            tracemalloc.Filter(False, str(REPO / "server" / "simulator" / "*"), all_frames=True),
        ]
    )


def _retained_bytes(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> int:
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


# aiohttp warns of any body over 1 MB it is given whole; the upstream call is not under test.
@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
def test_a_finished_run_of_a_2mb_message_keeps_less_than_a_tenth_of_it(
    served: tuple[ThreadedServer, Services], simulator: SimulatorServer
) -> None:
    server, services = served
    headers = {"authorization": f"Bearer {KEY_ALICE}"}

    def ask(text: str) -> str:
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
        with httpx.Client(
            verify=TLS_UNUSED, base_url=server.base_url, headers=headers, timeout=120
        ) as client:
            answer = client.post("/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text[:500]
        completion_id: str = answer.json()["id"]
        return completion_id

    # Scripted answers: the simulator's default policy would scan the 2 MB for tool names,
    # hundreds of thousands of allocations traced at 64 frames each (seconds of CPU) that are
    # the simulator's, not the server's.
    simulator.state.script(
        UPSTREAM_MODEL, Scenario(steps=[Step(reply=Reply(text="Noted."), repeat=2)])
    )
    ask("warm up")  # first-use allocations (caches, lazy imports) are no run's
    tracemalloc.start(64)
    try:
        gc.collect()
        before = _server_side(tracemalloc.take_snapshot())
        completion_id = ask(PASTED_WORD * (MESSAGE_CHARS // len(PASTED_WORD)))
        simulator.state.reset()  # its recording of the request is the simulator's, not ours
        gc.collect()
        after = _server_side(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    run = services.runs.get(completion_id, owner="alice")
    assert run is not None  # still kept, and replayable
    assert run.finished is not None
    retained = _retained_bytes(before, after)
    assert retained < RETAINED_BOUND, f"{retained} bytes kept after the run ended"
