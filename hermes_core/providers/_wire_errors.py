"""Upstream errors as ProviderError, read off the wire: statuses, error bodies, stream frames,
transport failures. No SDK here: the adapters that read the wire themselves (Chat Completions)
must not pay for importing the openai and anthropic SDKs (``_sdk_errors.py`` maps theirs)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from hermes_core.errors import ErrorKind, ProviderError

_CONTEXT_OVERFLOW_HINTS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
)
_STREAM_ERROR_KINDS = {
    "rate_limit_error": ErrorKind.RATE_LIMIT,
    "rate_limit_exceeded": ErrorKind.RATE_LIMIT,
    "overloaded_error": ErrorKind.SERVER_ERROR,
    "api_error": ErrorKind.SERVER_ERROR,
    "server_error": ErrorKind.SERVER_ERROR,
    "authentication_error": ErrorKind.AUTH,
    "permission_error": ErrorKind.FORBIDDEN,
    "not_found_error": ErrorKind.NOT_FOUND,
    "invalid_request_error": ErrorKind.INVALID_REQUEST,
    "timeout_error": ErrorKind.TIMEOUT,
}
MAX_RETRY_AFTER = 3600.0


def redact(text: str) -> str:
    """Mask credential-looking tokens (``sk-...`` and long opaque strings)."""
    return re.sub(r"sk-[A-Za-z0-9_\-]{6,}", "sk-***", text)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return min(max(0.0, float(raw)), MAX_RETRY_AFTER)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, (when - datetime.now(UTC)).total_seconds()), MAX_RETRY_AFTER)


def classify_status(status: int, message: str) -> ErrorKind:
    lowered = message.lower()
    if status == 429:
        return ErrorKind.RATE_LIMIT
    if status == 401:
        return ErrorKind.AUTH
    if status == 403:
        return ErrorKind.FORBIDDEN
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 408:
        return ErrorKind.TIMEOUT
    if status == 413 or (
        status in (400, 422) and any(hint in lowered for hint in _CONTEXT_OVERFLOW_HINTS)
    ):
        return ErrorKind.CONTEXT_OVERFLOW
    if status >= 500:
        return ErrorKind.SERVER_ERROR
    return ErrorKind.INVALID_REQUEST


def body_error(body: object) -> tuple[str | None, str | None]:
    """(type, message) of an error body in either vendor's shape."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            kind = inner.get("type") or inner.get("code")
            message = inner.get("message")
            return (
                str(kind) if kind is not None else None,
                str(message) if message is not None else None,
            )
    return None, None


def error_from_status(
    provider: str, status: int, headers: Mapping[str, str], body: bytes
) -> ProviderError:
    """The ProviderError for an HTTP error answer read without the SDK."""
    try:
        parsed: object = json.loads(body)
    except ValueError:
        parsed = None
    error_type, error_message = body_error(parsed)
    detail = error_message or body.decode("utf-8", "replace")[:300] or f"HTTP {status}"
    return ProviderError(
        f"{provider}: HTTP {status}"
        + (f" {error_type}" if error_type else "")
        + f": {redact(detail)}",
        kind=classify_status(status, detail),
        provider=provider,
        status_code=status,
        retry_after=parse_retry_after(headers),
    )


def error_from_stream_frame(provider: str, frame: object) -> ProviderError:
    """The ProviderError for an ``{"error": ...}`` frame inside a started stream."""
    error_type, error_message = body_error(frame)
    return ProviderError(
        f"{provider}: upstream stream error"
        + (f" {error_type}" if error_type else "")
        + f": {redact(error_message or 'no message')}",
        kind=_STREAM_ERROR_KINDS.get(error_type or "", ErrorKind.SERVER_ERROR),
        provider=provider,
    )


def unreadable_response(provider: str, what: str) -> ProviderError:
    return ProviderError(
        f"{provider}: unreadable upstream response ({what})",
        kind=ErrorKind.INVALID_RESPONSE,
        provider=provider,
    )


def timed_out(provider: str) -> ProviderError:
    return ProviderError(
        f"{provider}: upstream timed out", kind=ErrorKind.TIMEOUT, provider=provider
    )


def connection_failed(provider: str, exc: Exception) -> ProviderError:
    """A transport failure: no answer, or a connection lost mid-stream (named by its type only:
    transport messages can carry URLs with credentials)."""
    return ProviderError(
        f"{provider}: connection to upstream failed ({type(exc).__name__})",
        kind=ErrorKind.CONNECTION,
        provider=provider,
    )
