"""The run a log line is about: a context variable set where the serving layer starts a run.

Set in the request's task just before the run's task is created, so both carry it: asyncio
copies the context into every task at its creation (the run's own, its model calls', its
tools'), and the tool executor copies it into the worker threads of plain-function tools. A
sub-agent's lines carry the run of the request that spawned it.

The trace and span ids come from whoever traces runs (:func:`use_span_ids`), looked up by run
id when a line is written: nothing is read on the hot path, only when something is logged.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(slots=True)
class RunContext:
    """Read-only once made (not frozen: that costs 0.3 µs more to build, once per run)."""

    run_id: str
    session_id: str | None
    principal: str
    """The API key's principal name (never the key)."""


current_run: ContextVar[RunContext | None] = ContextVar("hermes_run", default=None)

SpanIds = Callable[[str], tuple[str, str] | None]
"""A run id → the (trace id, span id) of its span, as hex, when it is traced."""

_span_ids: SpanIds | None = None


def bind_run(run_id: str, session_id: str | None, principal: str) -> None:
    """From here on (in this task and the tasks it creates), log lines are about this run."""
    current_run.set(RunContext(run_id, session_id, principal))


def use_span_ids(lookup: SpanIds | None) -> None:
    """Where log lines find their run's trace ids (tracing installs it; None: not traced)."""
    global _span_ids
    _span_ids = lookup


def span_ids(run_id: str) -> tuple[str, str] | None:
    return _span_ids(run_id) if _span_ids is not None else None
