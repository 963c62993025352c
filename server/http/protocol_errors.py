"""What a request refused below the app (by the HTTP parser, or by the connection limits) is told.

uvicorn answers a request its parser rejects — a bad request line or method, a malformed header,
a bad chunk, both Content-Length and Transfer-Encoding, a URL longer than the parser's 64 KiB —
with a plain-text 400 that says only "Invalid HTTP request received.". Clients of an
OpenAI-compatible server expect the error envelope there as everywhere: :func:`refusal` writes
one, and :func:`parser_refusal` says which status and message a parser error deserves.

Such an answer always closes the connection: the parser cannot resume after an error, nor can
the server tell where the next request would begin.

A WebSocket handshake refused below the app (no ``Sec-WebSocket-Key``, a bad version; a socket
the app closes before accepting it; a 500) is answered in plain text by the ``websockets``
library: :func:`enveloping_websockets` puts the envelope there too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import httptools
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Response
from websockets.server import ServerProtocol

from hermes_core import json_codec
from server.errors import error_envelope

log = logging.getLogger("hermes.http")

_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    414: b"URI Too Long",
    431: b"Request Header Fields Too Large",
}

_URL_TOO_LONG = "The request URL is too long: the server parses at most 65535 bytes of it."
"""httptools' URL parser keeps offsets in 16 bits: a longer URL is refused (414)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    code: str


def refusal(refused: Refusal, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole response refusing a request (uvicorn's ``default_headers``, its date and server
    headers, included), ending the connection."""
    body = json_codec.dumps(error_envelope(refused.status, refused.message, code=refused.code))
    lines = [b"HTTP/1.1 %d %s\r\n" % (refused.status, _REASONS[refused.status])]
    lines += [name + b": " + value + b"\r\n" for name, value in default_headers]
    lines += [
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n\r\n",
        body,
    ]
    return b"".join(lines)


def parser_refusal(error: BaseException | None) -> Refusal:
    """What a request the parser rejected with ``error`` is told.

    The parser's own reasons are fixed strings (``Invalid header token``), safe and useful to
    repeat; an exception raised in a callback of uvicorn's (as parsing the URL, on the head's
    end) arrives wrapped, the cause as its context.
    """
    if isinstance(error, httptools.HttpParserCallbackError):
        cause = error.__context__
        if not isinstance(cause, httptools.HttpParserError):
            # Not the client's doing but a fault of the server's own callbacks: answered as a
            # bad request (uvicorn's choice), logged so that it is seen.
            log.error("an HTTP parser callback failed", exc_info=cause)
            return Refusal(400, "Invalid HTTP request.", "invalid_http_request")
        error = cause
    if isinstance(error, httptools.HttpParserInvalidURLError):
        # Its reason may quote the URL: not repeated.
        if "too long" in str(error):
            return Refusal(414, _URL_TOO_LONG, "url_too_long")
        return Refusal(400, "Invalid HTTP request: the URL is malformed.", "invalid_http_request")
    if str(error) == "Pause on PRI/Upgrade":  # the preface of HTTP/2 with prior knowledge
        return Refusal(
            400, "Invalid HTTP request: HTTP/2 is not served; use HTTP/1.1.", "invalid_http_request"
        )
    if isinstance(error, httptools.HttpParserInvalidMethodError):
        return Refusal(
            400,
            "Invalid HTTP request: the request line does not begin with a known method.",
            "invalid_http_request",
        )
    if isinstance(error, httptools.HttpParserError) and str(error):
        return Refusal(400, f"Invalid HTTP request: {error}.", "invalid_http_request")
    return Refusal(400, "Invalid HTTP request.", "invalid_http_request")


_WEBSOCKET_CODES = {400: "invalid_websocket_handshake", 426: "invalid_websocket_handshake"}
_WEBSOCKET_MESSAGES = {
    403: "The WebSocket connection was refused.",
    500: "The server had an internal error.",
}
"""What is said where ``websockets`` gives no reason, or one naming no fault of the client's."""


_ENVELOPING: dict[type[asyncio.Protocol], type[asyncio.Protocol]] = {}
"""Each enveloping class made, by the class it builds on (one per server, not per connection)."""


def enveloping_websockets(
    protocol: type[asyncio.Protocol] | None,
) -> type[asyncio.Protocol] | None:
    """uvicorn's WebSocket protocol class ``protocol``, its refused handshakes answered in the
    error envelope (a protocol of another library, or none, is left as it is)."""
    if protocol is None or not issubclass(protocol, WebSocketsSansIOProtocol):
        return protocol
    made = _ENVELOPING.get(protocol)
    if made is None:
        base = protocol

        def __init__(self: WebSocketsSansIOProtocol, *args: Any, **kwargs: Any) -> None:
            base.__init__(self, *args, **kwargs)
            _envelope_rejections(self.conn)

        made = type(f"Enveloping{base.__name__}", (base,), {"__init__": __init__})
        _ENVELOPING[protocol] = made
    return made


def _envelope_rejections(connection: ServerProtocol) -> None:
    """Every response ``connection`` makes to refuse a handshake (``reject``: whether the
    library refuses it or uvicorn does) carries the envelope instead of plain text."""
    plain = connection.reject

    def reject(status: HTTPStatus | int, text: str) -> Response:
        return _enveloped(plain(status, text))

    connection.reject = reject  # type: ignore[method-assign]


def _enveloped(response: Response) -> Response:
    status = response.status_code
    said = bytes(response.body).decode("utf-8", "replace").strip().split("\n")[0]
    message = _WEBSOCKET_MESSAGES.get(status) or said or response.reason_phrase
    code = _WEBSOCKET_CODES.get(status, "server_error" if status >= 500 else None)
    body = json_codec.dumps(error_envelope(status, message, code=code))
    headers = response.headers
    del headers["Content-Type"], headers["Content-Length"]
    headers["Content-Type"] = "application/json"
    headers["Content-Length"] = str(len(body))
    return dataclasses.replace(response, body=body)
