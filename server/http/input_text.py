"""Text the server refuses at the door: NUL characters and lone surrogates, wherever they come.

Neither can be stored: PostgreSQL refuses NUL in text and JSON, and a lone surrogate (``"\\ud800"``
is a valid JSON escape) has no UTF-8 encoding, so no store and no upstream can take it. Rather
than change what a client said, the server answers 400 before any work starts, the same way for
both characters and on every route:

- in a JSON body: :class:`StrictJSONRoute` (FastAPI's parser accepts both; the hot path's parser
  already refuses lone surrogates, and hands bodies holding ``\\u0000`` to the route);
- in the URL (``%00`` in a path or query; the HTTP parser itself refuses NUL in headers and
  raw bytes that are not UTF-8): :class:`RefuseNulInURL`.

What reaches the store another way (a model's output, a tool's) is cleaned there instead; see
:mod:`hermes_core.persistence.storable`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from hermes_core.persistence.storable import first_unstorable
from server.errors import error_response

_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
"""The JSON escapes that may spell an unstorable character (``\\u0000``, ``\\ud800``-``\\udfff``)
— a cheap test on the raw bytes before the parsed body is searched."""


def may_hold_unstorable(body: bytes) -> bool:
    """False when the JSON ``body`` surely holds no unstorable character (the common case).

    Raw NUL and raw surrogates are not valid JSON (or UTF-8) at all; only escapes spell them."""
    return _SUSPECT_ESCAPE.search(body) is not None


def parse_json_body(body: bytes) -> Any:
    """``body`` parsed as JSON, refusing unstorable text with the error a parser would raise.

    Only UTF-8 is JSON (RFC 8259): the standard library would also read UTF-16 and UTF-32,
    whose escapes the search for unstorable text below cannot see."""
    try:
        text = body.decode("utf-8-sig")  # a byte order mark is let pass, as before
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError("a JSON body is UTF-8 text", "", exc.start) from None
    parsed = json.loads(text)
    if may_hold_unstorable(body) and (found := first_unstorable(parsed)) is not None:
        what = "a NUL character (\\u0000)" if found == "\x00" else "a lone surrogate"
        escape = _SUSPECT_ESCAPE.search(body)
        position = escape.start() if escape else 0
        raise json.JSONDecodeError(
            f"text may not hold {what}", body.decode("utf-8", "replace"), position
        )
    return parsed


class StrictJSONRequest(Request):
    """A request whose ``json()`` refuses unstorable text (FastAPI's routes call it)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json_body(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """An ``APIRoute`` whose handler reads the body through :class:`StrictJSONRequest`: a JSON
    body that holds unstorable text is refused as invalid JSON (400)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict


class RefuseNulInURL:
    """Pure-ASGI middleware: 400 for a path or query string that decodes to a NUL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and ("\x00" in scope["path"] or b"%00" in scope["query_string"]):
            response = error_response(
                400, "The URL may not hold a NUL character (%00).", code="invalid_url"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
