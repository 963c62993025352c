"""Stamps run id and sequence number on events, in one place, and queues them for the run."""

from __future__ import annotations

import asyncio
from typing import Any

from hermes_core.events import AgentEvent


class Emitter:
    """Creates a run's events in order; the run's generator drains :attr:`queue`.

    Call :meth:`emit` only from the event loop's thread (tools in worker threads do not emit).
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
        self._seq = 0

    def emit(self, event_class: type[Any], **fields: Any) -> Any:
        event = event_class(run_id=self.run_id, seq=self._seq, **fields)
        self._seq += 1
        self.queue.put_nowait(event)
        return event

    def close(self) -> None:
        """Tell the reader that no event follows."""
        self.queue.put_nowait(None)
