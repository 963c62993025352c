"""Translate the openai and anthropic SDKs' exceptions into ProviderError, in one place.

Only the adapters that call an SDK import this (and so the SDKs); what reads the wire without
one is in ``_wire_errors.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import anthropic
import httpx2
import openai

from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers._wire_errors import (
    body_error,
    classify_status,
    connection_failed,
    error_from_stream_frame,
    parse_retry_after,
    redact,
    timed_out,
    unreadable_response,
)


def _from_sdk_error(exc: Exception, provider: str) -> ProviderError:
    if isinstance(exc, openai.APITimeoutError | anthropic.APITimeoutError):
        return ProviderError(
            f"{provider}: upstream timed out", kind=ErrorKind.TIMEOUT, provider=provider
        )
    if isinstance(exc, openai.APIConnectionError | anthropic.APIConnectionError):
        return ProviderError(
            f"{provider}: connection to upstream failed ({exc.__cause__ or exc})",
            kind=ErrorKind.CONNECTION,
            provider=provider,
        )
    if isinstance(exc, openai.APIResponseValidationError | anthropic.APIResponseValidationError):
        return ProviderError(
            f"{provider}: upstream answered an invalid response: {exc.message}",
            kind=ErrorKind.INVALID_RESPONSE,
            provider=provider,
            status_code=exc.status_code,
        )
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError) and exc.status_code >= 400:
        error_type, error_message = body_error(exc.body)
        detail = error_message or exc.message
        return ProviderError(
            f"{provider}: HTTP {exc.status_code}"
            + (f" {error_type}" if error_type else "")
            + f": {redact(detail)}",
            kind=classify_status(exc.status_code, detail),
            provider=provider,
            status_code=exc.status_code,
            retry_after=parse_retry_after(exc.response.headers),
        )
    if isinstance(exc, openai.APIError | anthropic.APIError):
        # An error frame inside an already-started (HTTP 200) stream.
        return error_from_stream_frame(provider, exc.body or {"message": exc.message})
    return unreadable_response(provider, type(exc).__name__)


@contextmanager
def sdk_errors(provider: str) -> Iterator[None]:
    """Run SDK calls; re-raise any SDK failure as a ProviderError naming ``provider``."""
    try:
        yield
    except (openai.OpenAIError, anthropic.AnthropicError, json.JSONDecodeError) as exc:
        raise _from_sdk_error(exc, provider) from exc
    except httpx2.TimeoutException as exc:
        # The anthropic SDK lets transport errors raised while reading a stream body through
        # unwrapped (openai wraps them); both end up here as the same ProviderError.
        raise timed_out(provider) from exc
    except httpx2.TransportError as exc:
        raise connection_failed(provider, exc) from exc
