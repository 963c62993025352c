"""What a run's trace starts from, handed by the serving layer to the span view through
``RunInfo.trace_parent`` (a module of its own: both sides import it)."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_core.messages import Message


@dataclass(slots=True)
class TraceStart:
    """What a run's trace needs from the request that started it (``RunInfo.trace_parent``)."""

    parent: object
    """The OpenTelemetry context of the client's ``traceparent`` (an empty one without)."""
    history: list[Message] | None = None
    """The conversation as the run starts, when message content is captured: the events
    carry only what the run adds. The span view takes it (and lets go of it) at the start."""
