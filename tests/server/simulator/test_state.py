"""The simulator's bookkeeping: what it records of the calls it serves."""

from __future__ import annotations

import pytest

from server.simulator import state as simulator_state
from server.simulator.state import SimulatorState


def test_the_request_log_keeps_only_the_newest_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # The built-in simulator may answer a long-running demo server: its log must stay bounded.
    monkeypatch.setattr(simulator_state, "MAX_RECORDED", 3)
    sim = SimulatorState()
    for n in range(5):
        sim.begin_call(
            api="chat_completions",
            path="/v1/chat/completions",
            headers={},
            body={"model": "m", "n": n},
            api_key=None,
        )
    assert [(r.seq, r.body["n"]) for r in sim.requests()] == [(2, 2), (3, 3), (4, 4)]
    sim.reset()
    assert sim.requests() == []
