"""Translate the openai and anthropic SDKs' exceptions into ProviderError, in one place.

Only the adapters that call an SDK use this; what reads the wire without one is in
``_wire_errors.py``. Neither SDK is imported here: an adapter imports its own, and an exception
of an SDK that was never imported cannot be raised, so only the loaded ones are checked (an
Anthropic-only server never imports openai, ~0.3 s).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

import httpx2

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

if TYPE_CHECKING:
    import anthropic
    import openai


class _SdkErrors(NamedTuple):
    """The exception classes of the SDKs loaded, kind by kind."""

    base: tuple[type[openai.OpenAIError] | type[anthropic.AnthropicError], ...]
    timeout: tuple[type[openai.APITimeoutError] | type[anthropic.APITimeoutError], ...]
    connection: tuple[type[openai.APIConnectionError] | type[anthropic.APIConnectionError], ...]
    invalid: tuple[
        type[openai.APIResponseValidationError] | type[anthropic.APIResponseValidationError], ...
    ]
    status: tuple[type[openai.APIStatusError] | type[anthropic.APIStatusError], ...]
    api: tuple[type[openai.APIError] | type[anthropic.APIError], ...]


def _loaded_sdk_errors() -> _SdkErrors:
    errors = _SdkErrors((), (), (), (), (), ())
    if "openai" in sys.modules:
        import openai

        errors = _SdkErrors(
            (*errors.base, openai.OpenAIError),
            (*errors.timeout, openai.APITimeoutError),
            (*errors.connection, openai.APIConnectionError),
            (*errors.invalid, openai.APIResponseValidationError),
            (*errors.status, openai.APIStatusError),
            (*errors.api, openai.APIError),
        )
    if "anthropic" in sys.modules:
        import anthropic

        errors = _SdkErrors(
            (*errors.base, anthropic.AnthropicError),
            (*errors.timeout, anthropic.APITimeoutError),
            (*errors.connection, anthropic.APIConnectionError),
            (*errors.invalid, anthropic.APIResponseValidationError),
            (*errors.status, anthropic.APIStatusError),
            (*errors.api, anthropic.APIError),
        )
    return errors


def _from_sdk_error(exc: Exception, provider: str) -> ProviderError:
    sdk = _loaded_sdk_errors()
    if isinstance(exc, sdk.timeout):
        return ProviderError(
            f"{provider}: upstream timed out", kind=ErrorKind.TIMEOUT, provider=provider
        )
    if isinstance(exc, sdk.connection):
        return ProviderError(
            f"{provider}: connection to upstream failed ({exc.__cause__ or exc})",
            kind=ErrorKind.CONNECTION,
            provider=provider,
        )
    if isinstance(exc, sdk.invalid):
        return ProviderError(
            f"{provider}: upstream answered an invalid response: {exc.message}",
            kind=ErrorKind.INVALID_RESPONSE,
            provider=provider,
            status_code=exc.status_code,
        )
    if isinstance(exc, sdk.status) and exc.status_code >= 400:
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
    if isinstance(exc, sdk.api):
        # An error frame inside an already-started (HTTP 200) stream.
        return error_from_stream_frame(provider, exc.body or {"message": exc.message})
    return unreadable_response(provider, type(exc).__name__)


@contextmanager
def sdk_errors(provider: str) -> Iterator[None]:
    """Run SDK calls; re-raise any SDK failure as a ProviderError naming ``provider``."""
    try:
        yield
    except json.JSONDecodeError as exc:
        raise _from_sdk_error(exc, provider) from exc
    except httpx2.TimeoutException as exc:
        # The anthropic SDK lets transport errors raised while reading a stream body through
        # unwrapped (openai wraps them); both end up here as the same ProviderError.
        raise timed_out(provider) from exc
    except httpx2.TransportError as exc:
        raise connection_failed(provider, exc) from exc
    except Exception as exc:
        if not isinstance(exc, _loaded_sdk_errors().base):
            raise  # not an SDK's: as it is
        raise _from_sdk_error(exc, provider) from exc
