"""Exceptions raised by hermes_core.

The tree::

    HermesError                      root of everything hermes_core raises on purpose
    ├── ConfigurationError           a provider or agent was configured in a way that cannot work
    ├── InvalidRequestError          a run was asked for something that cannot be done (a client
    │                                tool named like a server tool, ...); a 400 for HTTP callers
    └── ProviderError                an upstream model call failed; carries status_code,
        │                            retry_after and a classification (ErrorKind)
        └── (no subclasses)          the kind, not the class, tells retry/fallback what to do

Signals that steer the agent loop (for example "let the model retry this tool call") are not
failures and do not live here.
"""

from __future__ import annotations

import errno
import sqlite3
from enum import StrEnum


class HermesError(Exception):
    """Root of every exception hermes_core raises on purpose."""


class ConfigurationError(HermesError):
    """A provider or agent setting that cannot work (unknown api_mode, missing model, ...)."""


class InvalidRequestError(HermesError):
    """A run request that cannot be served as asked; ``param`` names the culprit."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class ErrorKind(StrEnum):
    """Why an upstream call failed; retry and fallback decide on this, never on the message."""

    RATE_LIMIT = "rate_limit"
    """429: transient, honour Retry-After. (Anthropic's 529 overloaded is a SERVER_ERROR.)"""
    SERVER_ERROR = "server_error"
    """5xx, including Anthropic's 529 overloaded: transient."""
    AUTH = "auth"
    """401: the credential is wrong or expired; re-read it once, then fail over."""
    FORBIDDEN = "forbidden"
    """403: the credential may not use this model or endpoint."""
    NOT_FOUND = "not_found"
    """404: usually an unknown model id; fail over."""
    TIMEOUT = "timeout"
    """No answer in time (connect, first byte or between chunks): transient."""
    CONNECTION = "connection"
    """The connection failed or dropped mid-stream: transient."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The prompt is larger than the model's context window: compress, do not retry as is."""
    INVALID_REQUEST = "invalid_request"
    """Any other 4xx: our request is wrong; retrying cannot help."""
    INVALID_RESPONSE = "invalid_response"
    """The upstream answered something we cannot parse."""

    @property
    def transient(self) -> bool:
        """True when retrying the same request may succeed."""
        return self in _TRANSIENT


_TRANSIENT = frozenset(
    {ErrorKind.RATE_LIMIT, ErrorKind.SERVER_ERROR, ErrorKind.TIMEOUT, ErrorKind.CONNECTION}
)


class ProviderError(HermesError):
    """An upstream model call failed.

    The message is safe to show to users and to log: it never contains a credential.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        provider: str,
        status_code: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        """The classification retry and fallback act on."""
        self.provider = provider
        """Name of the provider whose call failed."""
        self.status_code = status_code
        """HTTP status of the upstream answer, when there was one."""
        self.retry_after = retry_after
        """Seconds the upstream asked us to wait (Retry-After / retry-after-ms), when given."""

    @property
    def transient(self) -> bool:
        return self.kind.transient

    def __repr__(self) -> str:
        return (
            f"ProviderError({self.message!r}, kind={self.kind.value}, provider={self.provider!r}, "
            f"status_code={self.status_code}, retry_after={self.retry_after})"
        )


DISK_FULL_ERROR = "the server's disk is full: the run could not save its progress"
"""The error a run ends ``failed`` with when its store's disk filled (``RunFinished.error``):
a waiting client is answered 507, not the 502 of a failed upstream."""

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13
_FULL_TEXTS = ("database or disk is full", "no space left on device", "disk quota exceeded")
_POSTGRES_DISK_FULL = "53100"


def disk_full(exc: BaseException | None) -> bool:
    """``exc``, or what caused it (a driver's error wrapped by SQLAlchemy), means the disk is
    full."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        if isinstance(exc, sqlite3.Error):
            code = getattr(exc, "sqlite_errorcode", None)
            if code is not None and code & 0xFF == _SQLITE_FULL:
                return True
        if getattr(exc, "sqlstate", None) == _POSTGRES_DISK_FULL:
            return True
        if isinstance(exc, sqlite3.Error) or type(exc).__module__.startswith(
            ("sqlalchemy", "asyncpg", "psycopg")
        ):
            text = str(exc).lower()
            if any(full in text for full in _FULL_TEXTS):
                return True
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
    return False
