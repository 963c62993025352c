"""Structured-output requests as clients send them — Chat Completions' ``response_format``,
the Responses API's ``text.format`` — made into the engine's ``OutputFormat``, or refused with
a 400 naming the parameter."""

from __future__ import annotations

import re
from typing import Any

from hermes_core.agent.structured import InvalidSchema, check_schema
from hermes_core.providers import OutputFormat
from server.errors import APIError

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def chat_output_format(response_format: dict[str, Any] | None) -> OutputFormat | None:
    """``response_format``: ``text`` (None), ``json_object``, or ``json_schema`` with its
    ``json_schema: {name, schema, strict, description}``."""
    if response_format is None:
        return None
    spec = response_format.get("json_schema")
    return _output_format(
        response_format.get("type", "text"),
        spec if isinstance(spec, dict) else {},
        param="response_format",
    )


def responses_output_format(text_format: Any) -> OutputFormat | None:
    """``text.format``: ``text`` (None), ``json_object``, or ``json_schema`` with ``name``,
    ``schema``, ``strict`` and ``description`` beside its type."""
    if text_format is None:
        return None
    if not isinstance(text_format, dict):
        raise APIError(400, "text.format must be an object.", param="text.format")
    return _output_format(text_format.get("type", "text"), text_format, param="text.format")


def _output_format(kind: Any, spec: dict[str, Any], *, param: str) -> OutputFormat | None:
    if kind == "text":
        return None
    if kind == "json_object":
        return OutputFormat(kind="json_object")
    if kind != "json_schema":
        raise APIError(
            400, f"{param} type must be 'text', 'json_object' or 'json_schema'.", param=param
        )
    name, schema = spec.get("name"), spec.get("schema")
    if not isinstance(name, str) or not _NAME.match(name):
        raise APIError(
            400, f"{param} needs a name: 1 to 64 letters, digits, '_' or '-'.", param=param
        )
    if not isinstance(schema, dict):
        raise APIError(400, f"{param} needs a schema (a JSON Schema object).", param=param)
    try:
        check_schema(schema)
    except InvalidSchema as exc:
        raise APIError(400, f"{param} schema is {exc}.", param=param) from exc
    description = spec.get("description")
    return OutputFormat(
        kind="json_schema",
        name=name,
        schema=schema,
        strict=spec.get("strict") is True,
        description=description if isinstance(description, str) else None,
    )
