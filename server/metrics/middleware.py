"""The HTTP request layer of the metrics: a pure-ASGI middleware timing every API request."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.metrics.registry import ENDPOINTS, OTHER, Metrics

# Probes and scrapes would drown the API traffic and say nothing about it.
_UNCOUNTED_PATHS = frozenset({"/metrics", "/health", "/ready"})


def path_endpoint(path: str) -> str | None:
    """The label of a request path, or None for paths not worth counting (probes, scrapes)."""
    if path.startswith("/v1/"):
        head = path[4:].split("/", 2)
        name = "chat_completions" if head[:2] == ["chat", "completions"] else head[0]
        return name if name in ENDPOINTS else OTHER
    return None if path in _UNCOUNTED_PATHS else OTHER


class RequestMetrics:
    """Pure-ASGI middleware: ``hermes_requests_total`` and ``hermes_request_duration_seconds``
    by endpoint and status.

    The request is recorded just before its last body message goes out, so a client that reads
    the response and then scrapes ``/metrics`` always finds it counted; streams are timed to
    their end. A request that dies before any response counts as a 500.
    """

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = path_endpoint(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None:
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500
        recorded = False

        def record() -> None:
            nonlocal recorded
            recorded = True
            self.metrics.record_request(endpoint, status, time.monotonic() - started)

        async def tracking_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif not message.get("more_body") and not recorded:
                record()  # the last body message of the response
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            if not recorded:  # an exception, or a stream the client walked away from
                record()
