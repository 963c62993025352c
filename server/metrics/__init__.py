"""Prometheus metrics: one more view of the event stream, plus the HTTP request layer.

:class:`Metrics` owns its own ``CollectorRegistry`` (never the process-global one) so that
several apps — and tests — can live in one process. It is fed two ways:

- :meth:`Metrics.observe` (:mod:`server.metrics.registry`) is a
  :class:`~server.runs.manager.RunManager` observer: it sees every event of every run on the
  event loop and turns runs, model calls, tools, budgets, fallbacks and interrupts into counters
  and histograms;
- :class:`RequestMetrics` (:mod:`server.metrics.middleware`) is a pure-ASGI middleware counting
  requests and their duration;
- :class:`~server.metrics.live.LiveCollector` (:mod:`server.metrics.live`) reads, at each
  scrape, the levels alerts need: the oldest live run's age, approvals pending, providers
  cooling down, MCP servers up.

Every label is bounded: endpoints are a fixed set, providers and models are the configured
ones (anything else is ``other``), tools are the registered ones (hallucinated or dynamic names
are ``other``), reasons and outcomes are enums. Never a run id, session, user or key.
"""

from server.metrics.live import LiveState, McpServerUp
from server.metrics.middleware import RequestMetrics, path_endpoint
from server.metrics.registry import Metrics, run_endpoint

__all__ = ["LiveState", "McpServerUp", "Metrics", "RequestMetrics", "path_endpoint", "run_endpoint"]
