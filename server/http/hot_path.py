"""The two endpoints every token goes through, served in front of the app's whole stack.

FastAPI's routing, dependency solving and request/response wrapping cost more CPU than uvicorn's
whole handling of a request: 0.32 M instructions for a trivial GET against 0.13 M for a bare ASGI
app under uvicorn (callgrind, 2026-11-22; see docs/architecture.md). Its middleware stack costs
more again: seven wrappers (Starlette's server-error middleware, FastAPI's telemetry and body
limit ones, and ours: request metrics, NUL in the URL, keys, body limit) each add a coroutine to
every request and a wrapped ``send`` to every message a stream sends. For
``POST /v1/chat/completions`` and ``POST /v1/responses`` the app (``server.app``) hands the
request to :class:`HotPath` before any of them, and it takes the common case itself: an
authenticated request with a JSON body within the size limit that the route's own model
accepts goes straight to the serving object, with what those middlewares would have done done
here, once: the request is counted and timed (as ``RequestMetrics`` does), and a crash is
answered by the app's 500 handler and re-raised for the server to log (as Starlette's
server-error middleware does).

Everything else — no or a wrong key, ``%00`` in the query, a body announced over the size limit
or that is not JSON or does not validate, another content type — is handed on, body included, to
the whole app, whose middlewares and FastAPI route answer it exactly as they always did (a body
that turns out over the limit as it arrives gets the body limit's own 413 here). So every error
answer has one source, and the routes stay the one description of the endpoints (and the OpenAPI
document). An error raised while serving goes to the handler FastAPI would have used for it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import APIError, error_response
from server.http.auth import KeyRing, Principal
from server.http.body_limit import too_large
from server.http.idempotency import Claim, Idempotency, checked_key, fingerprint, for_whom

Body = TypeVar("Body", bound=BaseModel)
Handler = Callable[[Request, Any], Response | Awaitable[Response]]
RecordRequest = Callable[[str, int, float], None]
"""``(endpoint, status, seconds)``: what the request metrics record of a request served."""


@dataclass(frozen=True, slots=True)
class HotRoute(Generic[Body]):
    """A POST route's body model, the serving call its FastAPI route makes, and the endpoint
    label its requests are counted under."""

    model: type[Body]
    create: Callable[[Body, Request, Principal], Awaitable[Response]]
    endpoint: str


class HotPath:
    """Serves the common case of ``routes`` (by path) itself; hands the rest to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Mapping[str, HotRoute[Any]],
        handlers: Mapping[Any, Handler],
        keyring: KeyRing,
        body_limit: Callable[[str], int],
        record: RecordRequest,
        idempotency: Idempotency | None = None,
    ) -> None:
        self.app = app
        """The whole app: its middlewares and routes answer what the hot path does not take."""
        self.routes = routes
        self.handlers = handlers
        """The app's exception handlers (FastAPI's ``exception_handlers``), read when needed."""
        self.keyring = keyring
        self.body_limit = body_limit
        self.record = record
        self.idempotency = idempotency
        """Where ``Idempotency-Key`` requests are answered once (see server/http/idempotency.py)."""

    def route_of(self, scope: Scope) -> HotRoute[Any] | None:
        if scope["type"] == "http" and scope["method"] == "POST":
            return self.routes.get(scope["path"])
        return None

    async def serve(self, route: HotRoute[Any], scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a request to ``route`` (see :meth:`route_of`), or hand it on."""
        started = time.monotonic()
        authorization, media, declared, key = _headers(scope)
        limit = self.body_limit(scope["path"])
        principal = None
        if b"%00" not in scope["query_string"] and (declared is None or declared <= limit):
            principal = self.keyring.authenticate(authorization)
        if principal is None:
            await self.app(scope, receive, send)  # its middlewares answer (401, 400, 413)
            return
        body, complete = await _read_body(receive, limit)
        if len(body) > limit:
            # As the app's body limit refuses it (its route would read the refusal as a body
            # that did not parse).
            self.record(route.endpoint, 413, time.monotonic() - started)
            await too_large(limit)(scope, receive, send)
            return
        parsed = _parse(route.model, media, body) if complete else None
        if parsed is None:
            # The app judges the body again, read once more: its route's words for what is wrong.
            await self.app(scope, _replaying(body, complete, receive), send)
            return
        scope.setdefault("state", {})["principal"] = principal  # as RequireKey leaves it
        if key is None or self.idempotency is None:
            await self._answer(route, parsed, principal, body, started, scope, receive, send)
            return
        try:
            fingerprinted = fingerprint(body, *for_whom(scope, principal))
            claim = Claim(principal.name, checked_key(key), scope["path"], fingerprinted)
        except APIError as exc:
            self.record(route.endpoint, exc.status, time.monotonic() - started)
            refusal = error_response(exc.status, exc.message, param=exc.param, code=exc.code)
            await refusal(scope, receive, send)
            return

        async def work(keyed_receive: Receive, keyed_send: Send) -> None:
            await self._answer(
                route, parsed, principal, body, started, scope, keyed_receive, keyed_send
            )

        await self.idempotency.serve(claim, work, receive, send)

    async def _answer(
        self,
        route: HotRoute[Any],
        parsed: BaseModel,
        principal: Principal,
        body: bytes,
        started: float,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        status = 500
        recorded = False
        response_started = False

        def record() -> None:
            nonlocal recorded
            recorded = True
            self.record(route.endpoint, status, time.monotonic() - started)

        async def tracking_send(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
            elif not recorded and not message.get("more_body"):
                record()  # before the last body message: a client that then scrapes sees it
            await send(message)

        # The body was read already: whoever reads it through the request gets it once more.
        request = Request(scope, _replaying(body, True, receive))
        try:
            try:
                response = await route.create(parsed, request, principal)
            except Exception as exc:
                handler = self._handler_for(exc)
                if handler is None:
                    raise
                response = await _called(handler, request, exc)
            await response(scope, receive, tracking_send)
        except Exception as exc:
            # As Starlette's server-error middleware: the app's 500 answer, then the exception
            # goes on up for the server to log.
            crashed = self.handlers.get(Exception) or self.handlers.get(500)
            if not response_started and crashed is not None:
                answer = await _called(crashed, request, exc)
                await answer(scope, receive, tracking_send)
            raise
        finally:
            if not recorded:  # an exception, or a stream the client walked away from
                record()

    def _handler_for(self, exc: Exception) -> Handler | None:
        # As Starlette's exception middleware looks them up; ``Exception`` itself is left to the
        # server-error answer, which comes after logging.
        for kind in type(exc).__mro__:
            if kind is Exception:
                return None
            handler = self.handlers.get(kind)
            if handler is not None:
                return handler
        return None


async def _called(handler: Handler, request: Request, exc: Exception) -> Response:
    answer = handler(request, exc)
    return await answer if inspect.isawaitable(answer) else answer


def _headers(scope: Scope) -> tuple[str | None, str, int | None, str | None]:
    """The request's authorization, media type (lower case), declared length and
    ``Idempotency-Key``, in one pass."""
    authorization: str | None = None
    media: str | None = None
    declared: int | None = None
    key: str | None = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            if authorization is None:
                authorization = value.decode("latin-1")
        elif name == b"content-type" and media is None:
            media = value.decode("latin-1").split(";", 1)[0].strip().lower()
        elif name == b"content-length" and value.isdigit():
            declared = int(value)
        elif name == b"idempotency-key" and key is None:
            key = value.decode("latin-1")
    return authorization, media or "", declared, key


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body, and whether all of it came (not when the client went away); reading
    stops once it is over ``limit`` bytes."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        seen += len(chunk)
        if not message.get("more_body", False) or seen > limit:
            return b"".join(chunks), seen <= limit


def _parse(model: type[BaseModel], media: str, body: bytes) -> BaseModel | None:
    """The body as ``model``, or None when the route should judge it (and word the error)."""
    # JSON only when the request says so, as FastAPI's routes require by default.
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
