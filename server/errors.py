"""Every error the server answers, in the OpenAI envelope, built here and only here.

``{"error": {"message", "type", "param", "code"}}`` with the right status, including for
FastAPI's own routing (404/405) and validation (422 → 400) errors, so OpenAI SDKs raise the
matching exception class with a readable message.

A full disk (``ENOSPC``, SQLite's "database or disk is full", PostgreSQL's ``disk_full``) is a
507 ``insufficient_storage`` wherever it surfaces: the client learns it may retry later, not that
the server is broken (see :func:`storage_full`).

A run that failed is reported with the same body whether the client waits for it (a 502) or
streams it (an error frame in the stream's own format, after the stream began): see
:func:`run_failed`.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from typing import Any, TypedDict

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

from hermes_core.errors import DISK_FULL_ERROR, InvalidRequestError
from hermes_core.errors import disk_full as storage_full

log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    507: "server_error",
    429: "rate_limit_error",
}

STORAGE_FULL_MESSAGE = (
    "The server's disk is full: this request could not be recorded. Retry later; the "
    "operator has been told (the server log)."
)


RUN_FAILED_STATUS = 502
"""The status of a request whose run failed before it produced any answer."""


class ErrorBody(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEnvelope(TypedDict):
    error: ErrorBody


class RunLimitExceeded(Exception):
    """A key, or the server, already has its maximum of runs in progress (429)."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class ServerDraining(Exception):
    """The server is shutting down: it finishes the runs it has and takes no new one (503)."""

    retry_after = 5


class RedisUnavailable(Exception):
    """This replica cannot reach the Redis the replicas share, for now: what needs it (a new
    run counted against its key's limit on every replica, a stop or steer passed to the
    replica running the run) is refused with a 503 to retry soon."""

    retry_after = 5


class SessionBusy(Exception):
    """Another turn of the conversation is running, and waiting was not allowed or lasted too
    long (409)."""


class APIError(Exception):
    """An error we answer on purpose, before any response byte was sent."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class QuotaExceeded(APIError):
    """A key's or end user's budget is used up until it resets (429 ``quota_exceeded``, of
    type ``insufficient_quota`` as OpenAI's quota errors; ``docs/budgets.md``)."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(429, message, code="quota_exceeded")
        self.retry_after = retry_after
        """Seconds until the budget resets."""


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> ErrorBody:
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if param is not None:
        param = _encodable(param)
    return {"message": _encodable(message), "type": kind, "param": param, "code": code}


def _encodable(text: str) -> str:
    """``text`` with any lone surrogate spelt as its escape (``\\udcff``): a message may
    quote what a client sent, such as a file id naming a path that is not UTF-8 (decoded with
    ``surrogateescape``), and a surrogate cannot be encoded, which would turn the refusal
    into a 500."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def error_envelope(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> ErrorEnvelope:
    return {"error": error_body(status, message, param=param, code=code)}


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = error_envelope(status, message, param=param, code=code)
    return JSONResponse(body, status, headers=headers)


def run_failed(error: str | None, *, retry_after: float | None = None) -> ErrorBody:
    """How a failed run is told, on every endpoint, streamed or not: a 502's body, or a 429's
    when the upstream refused it for its rate (``retry_after`` set, see
    ``RunFinished.retry_after``). Their codes, ``server_error`` and ``rate_limit_exceeded``,
    are ones the Responses API's own error codes allow."""
    message = error or "The run failed."
    if retry_after is not None:
        return error_body(429, message, code="rate_limit_exceeded")
    return error_body(RUN_FAILED_STATUS, message, code="server_error")


def run_failed_response(
    error: str | None, *, headers: dict[str, str], retry_after: float | None = None
) -> JSONResponse:
    """The answer to a waiting client whose run failed before it produced any answer: a 502;
    a 429 with ``retry-after`` when the upstream refused it for its rate (the client's SDK
    waits and retries, as it would against OpenAI); a 507 when the server's disk filled (the
    client may retry later; it is no upstream's fault)."""
    if error == DISK_FULL_ERROR:
        return storage_full_response(headers)
    body = {"error": run_failed(error, retry_after=retry_after)}
    if retry_after is not None:
        headers = {**headers, "retry-after": str(max(1, math.ceil(retry_after)))}
        return JSONResponse(body, 429, headers=headers)
    return JSONResponse(body, RUN_FAILED_STATUS, headers=headers)


def storage_full_response(headers: dict[str, str] | None = None) -> JSONResponse:
    headers = {**(headers or {}), "retry-after": "30"}
    return error_response(507, STORAGE_FULL_MESSAGE, code="insufficient_storage", headers=headers)


def _param_of(location: tuple[Any, ...] | list[Any]) -> str | None:
    parts = [str(p) for p in location if p != "body"]
    return ".".join(parts) or None


async def _storage_error(_: Request, exc: Exception) -> JSONResponse:
    # Registered for the exception classes a full disk arrives as (the hot path looks handlers
    # up by class, and leaves bare ``Exception`` to the server-error middleware).
    if storage_full(exc):
        log.error("the disk is full: a request was refused with 507", exc_info=exc)
        return storage_full_response()
    log.error("a request failed", exc_info=exc)
    return error_response(500, "The server had an internal error.", code="server_error")


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    if storage_full(exc):
        return storage_full_response()
    # Details go to the log (the server-error middleware logs it), never to the client.
    return error_response(500, "The server had an internal error.", code="server_error")


async def _redis_unavailable(_: Request, exc: Exception) -> JSONResponse:
    retry_after = exc.retry_after if isinstance(exc, RedisUnavailable) else 5
    message = (
        "This server cannot reach the replicas' Redis just now, which this request needs; "
        "retry shortly."
    )
    headers = {"retry-after": str(retry_after)}
    return error_response(503, message, code="redis_unavailable", headers=headers)


def _install_storage_handlers(app: FastAPI) -> None:
    for kind in (OSError, sqlite3.Error, SQLAlchemyError):
        app.add_exception_handler(kind, _storage_error)


def install_error_handlers(app: FastAPI) -> None:
    """Every exception that means an answer, translated once: ours (``APIError``), the
    engine's and the run manager's refusals, and FastAPI's routing and validation errors."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code)

    @app.exception_handler(InvalidRequestError)
    async def _invalid_request(_: Request, exc: InvalidRequestError) -> JSONResponse:
        return error_response(400, exc.message, param=exc.param)

    @app.exception_handler(QuotaExceeded)
    async def _quota_exceeded(_: Request, exc: QuotaExceeded) -> JSONResponse:
        body = error_envelope(429, exc.message, code=exc.code)
        body["error"]["type"] = "insufficient_quota"
        return JSONResponse(body, 429, headers={"retry-after": str(exc.retry_after)})

    @app.exception_handler(RunLimitExceeded)
    async def _too_many_runs(_: Request, exc: RunLimitExceeded) -> JSONResponse:
        headers = {"retry-after": str(exc.retry_after)}
        return error_response(429, exc.message, code="rate_limit_exceeded", headers=headers)

    @app.exception_handler(ServerDraining)
    async def _draining(_: Request, exc: ServerDraining) -> JSONResponse:
        headers = {"retry-after": str(exc.retry_after)}
        message = "This server is shutting down and takes no new runs; retry (on another replica)."
        return error_response(503, message, code="server_draining", headers=headers)

    app.add_exception_handler(RedisUnavailable, _redis_unavailable)

    @app.exception_handler(SessionBusy)
    async def _session_busy(_: Request, exc: SessionBusy) -> JSONResponse:
        return error_response(409, str(exc), code="session_busy")

    _install_storage_handlers(app)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "Request failed."
        if exc.status_code == 404 and message == "Not Found":
            message = "Unknown URL. See /openapi.json for the routes this server offers."
        response = error_response(exc.status_code, message)
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            # FastAPI reports where in the body the parser stopped, which names no param.
            reason = first.get("ctx", {}).get("error", "invalid JSON")
            return error_response(
                400, f"We could not parse the JSON body of your request: {reason}.", code=None
            )
        param = _param_of(first.get("loc", ()))
        detail = first.get("msg", "Invalid request.")
        message = f"Invalid value for '{param}': {detail}" if param else str(detail)
        return error_response(400, message, param=param)

    app.add_exception_handler(Exception, _unexpected)
