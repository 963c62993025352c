"""Process-wide settings for a serving process, applied once before the event loop starts."""

from __future__ import annotations

import gc
from collections.abc import Callable
from types import FrameType

import uvicorn

GEN0_THRESHOLD = 10_000
"""Container allocations between young-generation collections (CPython's default is 700).

A request allocates a few thousand short-lived containers (events, dicts, frames). At the
default, collections run several times per request and promote the objects of the requests
still in flight to the older generations, whose collections then walk them again
(bench/server_overhead.py measured ~0.4 ms of CPU per request in the collector)."""


def tune_garbage_collector() -> None:
    """Move everything alive now (modules, app, configuration) out of the collector's sight,
    collect the young generation less often, and turn the collector on (``main`` turns it off
    while a command's modules load).

    Objects frozen here are never scanned again, so full collections only walk what requests
    allocated; they stay reference-counted and are freed as usual when unreferenced outside a
    cycle. Nothing is collected first: a start leaves ~2,600 objects in garbage cycles among
    ~200,000 alive, which stay frozen (well under 1 MB), where a full collection would cost
    the start 0.07-0.12 s (#27). Only serving processes call this (the test suite builds many
    apps in one process).
    """
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
    gc.enable()


class ExitAwareServer(uvicorn.Server):
    """uvicorn's server, which says so (``on_exit``) as soon as it begins to exit, before it
    closes any connection: a run whose stream it then cuts is recorded as stopped by the
    shutdown, not by its client."""

    def __init__(self, config: uvicorn.Config, *, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)
