"""A real webhook endpoint for the tests: ``POST /hooks/{name}`` records each request's raw body
and headers (what a receiver verifies) and answers 200, or the statuses it was told to answer
first (``fail(name, 500, 500)``: two failures, then 200). Served on a free loopback port like
the simulator."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.http.threaded import ThreadedServer


@dataclass(frozen=True, slots=True)
class Received:
    """One request the endpoint got, and what it answered."""

    name: str
    body: bytes
    headers: dict[str, str]
    answered: int

    @property
    def event(self) -> dict[str, Any]:
        decoded: dict[str, Any] = json.loads(self.body)
        return decoded


class WebhookReceiver(ThreadedServer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        self._failures: dict[str, list[int]] = {}
        super().__init__(Starlette(routes=[Route("/hooks/{name}", self._hook, methods=["POST"])]))

    def url(self, name: str) -> str:
        return f"{self.base_url}/hooks/{name}"

    def fail(self, name: str, *statuses: int) -> None:
        """Answer the next requests to ``name`` with these statuses, then 200 again."""
        with self._lock:
            self._failures[name] = list(statuses)

    def received(self, name: str | None = None) -> list[Received]:
        with self._lock:
            return [r for r in self._received if name is None or r.name == name]

    def delivered(self, name: str) -> list[Received]:
        """The requests to ``name`` it answered 2xx."""
        return [r for r in self.received(name) if 200 <= r.answered < 300]

    async def _hook(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.body()
        with self._lock:
            failures = self._failures.get(name) or []
            status = failures.pop(0) if failures else 200
            self._received.append(Received(name, body, dict(request.headers), status))
        return Response(status_code=status)
