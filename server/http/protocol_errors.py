"""What a request refused below the app (by the HTTP parser, or by the connection limits) is told.

uvicorn answers a request its parser rejects — a bad request line or method, a malformed header,
a bad chunk, both Content-Length and Transfer-Encoding, a URL longer than the parser's 64 KiB —
with a plain-text 400 that says only "Invalid HTTP request received.". Clients of an
OpenAI-compatible server expect the error envelope there as everywhere: :func:`refusal` writes
one, and :func:`parser_refusal` says which status and message a parser error deserves.

Such an answer always closes the connection: the parser cannot resume after an error, nor can
the server tell where the next request would begin.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import httptools

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
