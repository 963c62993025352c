"""Stamps run id and sequence number on events, in one place, and hands them to the run's sink."""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from hermes_core.events import AgentEvent

Deliver = Callable[[AgentEvent], object]
"""Where a run's events go, synchronously, in order, as each one happens."""

P = ParamSpec("P")
E = TypeVar("E", bound=AgentEvent)


class Emitter:
    """Creates a run's events in order and delivers each at once.

    Its :meth:`emit` is an :class:`~hermes_core.events.Emit`. Delivery is a plain call, not a
    queue: whoever consumes the events (the server's run
    manager) sees each one in the task that produced it, with no task switch per event.
    Call :meth:`emit` only from the event loop's thread (tools in worker threads do not emit).
    """

    def __init__(self, run_id: str, deliver: Deliver) -> None:
        self.run_id = run_id
        self._deliver = deliver
        self._seq = 0

    def emit(
        self,
        event_class: Callable[Concatenate[str, int, P], E],
        /,
        *args: P.args,
        **fields: P.kwargs,
    ) -> E:
        event = event_class(self.run_id, self._seq, *args, **fields)
        self._seq += 1
        self._deliver(event)
        return event
