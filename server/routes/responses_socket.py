"""``/v1/responses`` over a WebSocket (the Open Responses WebSocket transport; the OpenAI SDK's
``client.responses.connect()``).

The key is checked at the handshake (``Authorization: Bearer``): without a valid one the
upgrade is answered with a 401 and the usual ``invalid_api_key`` error envelope. The client
then sends ``response.create`` events — the body of ``POST /v1/responses`` with ``"type"``
beside it, ``stream`` implied — and gets, for each, the same events a streamed HTTP response
carries, one per message. Turns on one connection run one after another; a bad event gets an
``error`` event (``{"type": "error", "status", "error": {...}}``) and the connection stays
open.
``stream``, ``stream_options`` and ``background`` are refused (the transport forbids them).
A ``store: false`` response is kept by the connection (not the store), so a later turn on the
same socket may continue it by ``previous_response_id``.
Closing the connection stops the run in progress; after 60 minutes the server closes it
(between turns) and the client reconnects.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from hermes_core.errors import InvalidRequestError
from hermes_core.json_codec import dumps_text
from hermes_core.messages import Message
from server.errors import (
    APIError,
    QuotaExceeded,
    RunLimitExceeded,
    ServerDraining,
    SessionBusy,
    error_body,
    error_response,
)
from server.http.input_text import parse_json_body
from server.protocol.responses import ResponseCreateRequest
from server.services import Services
from server.serving.responses import ResponsesServing

log = logging.getLogger("hermes.responses.socket")

router = APIRouter()

_ENVELOPE_ONLY = ("type", "stream_id", "generate")
"""Fields of a ``response.create`` event that are not the request's."""
_HTTP_ONLY = ("stream", "stream_options", "background")
"""Fields of ``POST /v1/responses`` that a socket's events must not carry."""
CONNECTION_SECONDS = 3600.0
"""How long a connection lasts (Open Responses: 60 minutes); a turn under way is finished
first, then the connection is closed and the client reconnects."""
_NO_KEY = "A valid API key is required (Authorization: Bearer <key>) to open this socket."
_CODES = {400: "invalid_request", 404: "not_found", 409: "conflict", 429: "rate_limit_exceeded"}


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket) -> None:
    services: Services = websocket.app.state.services
    principal = services.keyring.authenticate(websocket.headers.get("authorization"))
    if principal is None:
        await _refuse_handshake(websocket)
        return
    await websocket.accept()
    serving: ResponsesServing = websocket.app.state.responses
    closes_at = time.monotonic() + CONNECTION_SECONDS
    unstored: dict[str, list[Message]] = {}  # this connection's store=false responses
    try:
        while True:
            try:
                async with asyncio.timeout_at(_loop_time(closes_at)):
                    event = await _next_message(websocket)
            except TimeoutError:
                await websocket.close(code=1001, reason="The connection's 60 minutes are up.")
                return
            try:
                body = _create_request(event)
                events = serving.stream_events(body, websocket, principal, unstored=unstored)
                async for payload in events:
                    await websocket.send_text(dumps_text(payload))
            except WebSocketDisconnect:
                raise
            except Exception as exc:  # every refusal is an error event; the socket stays
                await websocket.send_text(json.dumps(_error_event(exc)))
    except WebSocketDisconnect:
        return


async def _refuse_handshake(websocket: WebSocket) -> None:
    """A 401 with the error envelope plain HTTP gets, as the handshake's answer: the SDK's
    ``responses.connect()`` raises ``websockets``' ``InvalidStatus``, whose ``response`` holds
    that status and body (a close before accepting is a bare 403 with nothing to read)."""
    refusal = error_response(401, _NO_KEY, code="invalid_api_key")
    try:
        await websocket.send_denial_response(refusal)
    except RuntimeError:  # a server without the denial extension: the bare refusal
        await websocket.close(code=1008, reason=_NO_KEY)


def _loop_time(monotonic_deadline: float) -> float:
    """A ``time.monotonic()`` deadline on the event loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic_deadline - time.monotonic())


async def _next_message(websocket: WebSocket) -> str | None:
    """The next message's text; None for a binary message (answered with an error event,
    where reading it as text would end the connection with a server error)."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    return text if isinstance(text, str) else None


def _create_request(text: str | None) -> ResponseCreateRequest:
    if text is None:
        raise APIError(400, "Send each event as a text message: one JSON event.")
    try:
        # As HTTP bodies are read: NUL and lone surrogates refused (no store can hold them).
        event = parse_json_body(text.encode())
    except ValueError as exc:
        raise APIError(400, f"Each message must be one JSON event ({exc}).") from exc
    if not isinstance(event, dict) or event.get("type") != "response.create":
        raise APIError(400, "Send response.create events on this socket.", param="type")
    for field in _HTTP_ONLY:
        if field in event:
            # Open Responses: these HTTP-only fields MUST NOT be sent on a socket.
            raise APIError(400, f"{field} is not allowed over a WebSocket.", param=field)
    fields = {key: value for key, value in event.items() if key not in _ENVELOPE_ONLY}
    return ResponseCreateRequest.model_validate({**fields, "stream": True})


def _error_event(exc: Exception) -> dict[str, Any]:
    status, message = 500, "The server had an internal error."
    param: str | None = None
    code: str | None = "server_error"
    if isinstance(exc, APIError):
        status, message, param, code = exc.status, exc.message, exc.param, exc.code
    elif isinstance(exc, InvalidRequestError):
        status, message, param, code = 400, exc.message, exc.param, None
    elif isinstance(exc, ValidationError):
        errors = exc.errors()
        where = ".".join(str(part) for part in errors[0]["loc"]) if errors else ""
        detail = errors[0]["msg"] if errors else "invalid request"
        status, message, param, code = 400, f"Invalid value for '{where}': {detail}", where, None
    elif isinstance(exc, RunLimitExceeded):
        status, message, code = 429, exc.message, "rate_limit_exceeded"
    elif isinstance(exc, SessionBusy):
        status, message, code = 409, str(exc), "session_busy"
    elif isinstance(exc, ServerDraining):
        status, message, code = 503, "This server is shutting down.", "server_draining"
    else:
        log.exception("a response.create on a WebSocket failed")
    # Open Responses requires a code on a socket's error events.
    error = error_body(
        status, message, param=param or None, code=code or _CODES.get(status, "error")
    )
    if isinstance(exc, QuotaExceeded):
        error["type"] = "insufficient_quota"  # as the HTTP answer says it
    return {"type": "error", "status": status, "error": error}
