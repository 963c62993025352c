"""Stamps run id and sequence number on events, in one place, and hands them to the run's sink."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_core.events import AgentEvent

Deliver = Callable[[AgentEvent], object]
"""Where a run's events go, synchronously, in order, as each one happens."""


class Emitter:
    """Creates a run's events in order and delivers each at once.

    Delivery is a plain call, not a queue: whoever consumes the events (the server's run
    manager) sees each one in the task that produced it, with no task switch per event.
    Call :meth:`emit` only from the event loop's thread (tools in worker threads do not emit).
    """

    def __init__(self, run_id: str, deliver: Deliver) -> None:
        self.run_id = run_id
        self._deliver = deliver
        self._seq = 0

    def emit(self, event_class: type[Any], **fields: Any) -> Any:
        event = event_class(run_id=self.run_id, seq=self._seq, **fields)
        self._seq += 1
        self._deliver(event)
        return event
