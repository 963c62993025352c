"""The two endpoints every token goes through, served without FastAPI's per-request machinery.

FastAPI's routing, dependency solving and request/response wrapping cost more CPU than uvicorn's
whole handling of a request: 0.32 M instructions for a trivial GET against 0.13 M for a bare ASGI
app under uvicorn (callgrind, 2026-11-22; see docs/architecture.md). For
``POST /v1/chat/completions`` and ``POST /v1/responses`` this middleware takes the common case
itself: an authenticated request with a JSON body the route's own model accepts goes straight
to the serving object.

Everything else — no or a wrong key, a body that is not JSON or does not validate, another
content type — is handed on, body included, to the FastAPI route, which answers it exactly as it
always did. So every error answer has one source, and the routes stay the one description of the
endpoints (and the OpenAPI document). An error raised while serving goes to the handler FastAPI
would have used for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.http.auth import Principal, principal_of

Body = TypeVar("Body", bound=BaseModel)
Handler = Callable[[Request, Any], Response | Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class HotRoute(Generic[Body]):
    """A POST route's body model, and the serving call its FastAPI route makes."""

    model: type[Body]
    create: Callable[[Body, Request, Principal], Awaitable[Response]]


class HotPath:
    """Pure-ASGI middleware: serves the common case of ``routes`` (by path) itself."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Mapping[str, HotRoute[Any]],
        handlers: Mapping[Any, Handler],
    ) -> None:
        self.app = app
        self.routes = routes
        self.handlers = handlers
        """The app's exception handlers (FastAPI's ``exception_handlers``), read when needed."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = None
        if scope["type"] == "http" and scope["method"] == "POST":
            route = self.routes.get(scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        body, complete = await _read_body(receive)
        # Whoever reads the body again through the request gets it once more.
        request = Request(scope, _replaying(body, complete, receive))
        principal = principal_of(scope)
        parsed = None
        if principal is not None and complete:
            parsed = _parse(route.model, request, body)
        if principal is None or parsed is None:
            await self.app(scope, _replaying(body, complete, receive), send)
            return
        try:
            response = await route.create(parsed, request, principal)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise  # as in FastAPI: the server-error middleware answers it
            answer = handler(request, exc)
            response = await answer if inspect.isawaitable(answer) else answer
        await response(scope, receive, send)

    def _handler_for(self, exc: Exception) -> Handler | None:
        # As Starlette's exception middleware looks them up; ``Exception`` itself is left to the
        # server-error middleware, which answers it after logging.
        for kind in type(exc).__mro__:
            if kind is Exception:
                return None
            handler = self.handlers.get(kind)
            if handler is not None:
                return handler
        return None


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request body, and whether all of it came (not when the client went away)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def _parse(model: type[BaseModel], request: Request, body: bytes) -> BaseModel | None:
    """The body as ``model``, or None when the route should judge it (and word the error)."""
    # JSON only when the request says so, as FastAPI's routes require by default.
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    maintype, _, subtype = media.partition("/")
    if maintype != "application" or not (subtype == "json" or subtype.endswith("+json")):
        return None
    if not body or b"\\u0000" in body:  # text the route refuses (see server/http/input_text.py)
        return None
    try:
        return model.model_validate_json(body)
    except Exception:  # invalid, or a validator refused it: the route will say why
        return None


def _replaying(body: bytes, complete: bool, receive: Receive) -> Receive:
    """A ``receive`` that gives the body already read once more, then goes on as ``receive``."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": not complete}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay
