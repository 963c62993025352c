"""Log lines for machines (``serve --log-format json``) and secrets kept out of every line.

JSON: one object per line, ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, an
``exception`` when there is one, and on every line written while serving a run ``run_id``,
``session_id``, ``principal`` (the key's principal, never the key) and, when the run is traced,
``trace_id`` and ``span_id`` of its span (:mod:`.run_context`). uvicorn's lines go through the
same handler (its own logging configuration is not installed in this mode).

Secrets, in either format: whatever is known to be one (every secret of the configuration,
the provider keys it names in the environment or in files, OTLP header values) is replaced by
``***`` wherever it appears, and so are bearer credentials, ``sk-`` keys and signed links'
tokens. This is a net under the rule that code never logs a secret, not a licence to.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import orjson
from pydantic import BaseModel, SecretStr

from server.telemetry.run_context import current_run, span_ids

LogFormat = Literal["text", "json"]
LOG_FORMAT_ENV = "HERMES_LOG_FORMAT"
MASK = "***"
MIN_SECRET_CHARS = 6
"""Shorter known secrets are not masked: masking every ``abc`` would garble the log and hide
nothing (such a key is guessed, not read)."""

_PATTERNS = re.compile(
    r"(?i)(?<=bearer )[^\s'\",]+"  # an Authorization header's credential
    r"|(?<=sk-)[A-Za-z0-9_\-]{6,}"  # OpenAI/Anthropic-style keys
    r"|(?<=/v1/workspaces/signed/)[^/\s?'\"]+"  # a signed link's token: its own authority
)


class Redactor:
    """Masks known secrets and credential-looking strings in a line."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        """Mask these too (a reloaded configuration's), from the next line on."""
        known = {*self.secrets, *(s for s in secrets if len(s) >= MIN_SECRET_CHARS)}
        # Longest first, so a secret containing another is masked whole; swapped in whole,
        # so a line being written on another thread sees the old list or the new one.
        self.secrets = sorted(known, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return _PATTERNS.sub(MASK, text)


class TextFormatter(logging.Formatter):
    """The usual ``LEVEL logger: message`` lines, with secrets masked."""

    def __init__(self, redact: Redactor, fmt: str) -> None:
        super().__init__(fmt)
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self.redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the run's ids when the line is about a run."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": self.redact(record.getMessage()),
        }
        run = current_run.get()
        if run is not None:
            line["run_id"] = run.run_id
            if run.session_id is not None:
                line["session_id"] = run.session_id
            line["principal"] = run.principal
            ids = span_ids(run.run_id)
            if ids is not None:
                line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.redact(self.formatException(record.exc_info))
        elif record.exc_text:
            line["exception"] = self.redact(record.exc_text)
        if record.stack_info:
            line["stack"] = self.redact(self.formatStack(record.stack_info))
        return orjson.dumps(line, default=str).decode()


def _utc(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


_redactor: Redactor | None = None
_PATTERNS_ONLY = Redactor()
"""The masking of the formatter in use, once :func:`use_log_format` chose one."""


def use_log_format(log_format: LogFormat, secrets: Iterable[str] = ()) -> None:
    """Format the root logger's lines (``text`` or ``json``), masking ``secrets``."""
    global _redactor
    redact = _redactor = Redactor(secrets)
    formatter: logging.Formatter = (
        JsonFormatter(redact) if log_format == "json" else TextFormatter(redact, TEXT_FORMAT)
    )
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO)
    for handler in root.handlers:
        handler.setFormatter(formatter)


def mask(text: str) -> str:
    """``text`` as a log line would show it: what else leaves the process (a span's error
    description) is masked alike."""
    return (_redactor or _PATTERNS_ONLY)(text)


def mask_secrets(secrets: Iterable[str]) -> None:
    """Mask these secrets too (a configuration reload's new keys), if lines are masked."""
    if _redactor is not None:
        _redactor.add(secrets)


def uvicorn_log_config(log_format: LogFormat) -> dict[str, Any] | None:
    """uvicorn's own logging configuration, for text; none for JSON, so that its loggers'
    lines reach the root handler (and its formatter) like every other line."""
    if log_format == "json":
        return None
    from uvicorn.config import LOGGING_CONFIG

    return LOGGING_CONFIG


def secrets_of(config: BaseModel, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every secret a configuration holds or names: its ``SecretStr`` values, the provider
    keys it names in environment variables and files, and the OTLP exporter's header values
    (a collector's token). Key commands are not run for this."""
    env = os.environ if environ is None else environ
    found = list(_secret_values(config))
    for provider in getattr(config, "providers", ()):
        variable = getattr(provider, "api_key_env", None)
        if variable and env.get(variable):
            found.append(env[variable].strip())
        key_file = getattr(provider, "api_key_file", None)
        if key_file:
            with contextlib.suppress(OSError):  # unreadable: its provider says so itself
                found.append(Path(key_file).read_text().strip())
    for variable in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        for pair in env.get(variable, "").split(","):
            _, equals, value = pair.partition("=")
            if not equals:
                # Malformed (`name: value`, as HTTP writes it): the SDK's warning quotes it.
                _, colon, value = pair.partition(":")
                value = value if colon else pair
            if value.strip():
                found += {value.strip(), unquote(value).strip()}
    return found


def _secret_values(value: object) -> Iterator[str]:
    if isinstance(value, SecretStr):
        secret = value.get_secret_value()
        if "://" in secret:  # a URL: its password is the secret (the rest is logged by name)
            password = urlsplit(secret).password
            if password:
                yield unquote(password)
        else:
            yield secret
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _secret_values(getattr(value, name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _secret_values(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secret_values(item)
