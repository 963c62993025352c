"""The simulator's memory: scripted scenarios, the prompt cache and every request received.

The simulator usually runs on its own thread (see ``runner.py``) while a test scripts it and
reads its recordings from the test's thread, so every mutation happens under one lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from server.simulator.cache import PromptCache
from server.simulator.scenario import Scenario, Step

Api = Literal["chat_completions", "responses", "anthropic_messages", "images"]
Outcome = Literal["pending", "completed", "error", "dropped", "disconnected"]
SCENARIO_HEADER = "x-sim-scenario"


@dataclass(slots=True)
class RecordedRequest:
    """One request the simulator received, and how it ended."""

    seq: int
    api: Api
    path: str
    headers: dict[str, str]
    """Lower-cased header names."""
    body: dict[str, Any]
    model: str
    scenario: str | None
    """The scenario key that served it, when scripted."""
    step_index: int | None
    """Which step of the scenario served it."""
    stream: bool
    status: int = 200
    outcome: Outcome = "pending"
    """``completed``; ``error`` (answered with an HTTP error); ``dropped`` (the simulator cut
    the stream as scripted); ``disconnected`` (the client closed the connection first)."""
    frames_sent: int = 0
    started_at: float = field(default_factory=time.monotonic)
    ended_at: float | None = None


@dataclass(slots=True)
class CallPlan:
    """What the simulator will do for one call."""

    record: RecordedRequest
    step: Step | None
    """None: no script applies, the default policy answers."""
    unauthorized: bool = False


MAX_RECORDED = 10_000
"""Calls the request log keeps (the newest)."""


class SimulatorState:
    def __init__(self, *, min_cacheable_tokens: int = 0) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._scenarios: dict[str, list[Step]] = {}
        self._cursors: dict[str, int] = {}
        self._api_keys: dict[str, str] = {}
        # The newest calls only: the built-in simulator may serve a long-running demo server.
        self._requests: deque[RecordedRequest] = deque(maxlen=MAX_RECORDED)
        self._calls = 0
        self._clock_offset = 0.0
        self.cache = PromptCache(self.now, min_cacheable_tokens=min_cacheable_tokens)

    # --- time ---------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() + self._clock_offset

    def advance_clock(self, seconds: float) -> None:
        """Move the simulator's clock forward (to expire cached prefixes without waiting)."""
        with self._lock:
            self._clock_offset += seconds

    # --- scripting ----------------------------------------------------------------------------

    def script(self, key: str, scenario: Scenario) -> None:
        """Install (or replace) the scenario served to calls for ``key``."""
        with self._lock:
            self._scenarios[key] = scenario.expanded()
            self._cursors[key] = 0
            if scenario.api_key is None:
                self._api_keys.pop(key, None)
            else:
                self._api_keys[key] = scenario.api_key

    def reset(self) -> None:
        """Forget scenarios, recordings and the cache."""
        with self._lock:
            self._scenarios.clear()
            self._cursors.clear()
            self._api_keys.clear()
            self._requests.clear()
            self._calls = 0
        self.cache.clear()

    def begin_call(
        self,
        *,
        api: Api,
        path: str,
        headers: Mapping[str, str],
        body: dict[str, Any],
        api_key: str | None,
    ) -> CallPlan:
        """Record a request and decide which scripted step (if any) serves it."""
        model = str(body.get("model", ""))
        header_key = headers.get(SCENARIO_HEADER)
        with self._changed:
            key = header_key if header_key in self._scenarios else None
            if key is None and model in self._scenarios:
                key = model
            step: Step | None = None
            step_index: int | None = None
            unauthorized = False
            if key is not None:
                required_key = self._api_keys.get(key)
                unauthorized = required_key is not None and api_key != required_key
                steps = self._scenarios[key]
                cursor = self._cursors[key]
                if not unauthorized and cursor < len(steps):
                    step, step_index = steps[cursor], cursor
                    self._cursors[key] = cursor + 1
            record = RecordedRequest(
                seq=self._calls,
                api=api,
                path=path,
                headers={k.lower(): v for k, v in headers.items()},
                body=body,
                model=model,
                scenario=key,
                step_index=step_index,
                stream=bool(body.get("stream")),
            )
            self._requests.append(record)
            self._calls += 1
            self._changed.notify_all()
        return CallPlan(record=record, step=step, unauthorized=unauthorized)

    def finish(
        self, record: RecordedRequest, outcome: Outcome, *, status: int | None = None
    ) -> None:
        with self._changed:
            record.outcome = outcome
            if status is not None:
                record.status = status
            record.ended_at = time.monotonic()
            self._changed.notify_all()

    def count_frame(self, record: RecordedRequest) -> None:
        record.frames_sent += 1  # a plain int store; readers tolerate a stale value

    # --- reading ------------------------------------------------------------------------------

    def requests(self, *, scenario: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self._requests if scenario is None or r.scenario == scenario]

    def wait_for(
        self, predicate: Callable[[list[RecordedRequest]], bool], timeout: float = 5.0
    ) -> bool:
        """Block the calling (test) thread until ``predicate(requests)`` holds or time runs out."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(list(self._requests)), timeout)
