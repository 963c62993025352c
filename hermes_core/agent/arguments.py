"""Reading the model's tool-call arguments: parse, detect truncation, coerce to the schema.

The loop's self-correction ladder decides what to do with each verdict; this module only
judges, so every rule is testable on plain strings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["ok", "truncated", "invalid"]


@dataclass(frozen=True, slots=True)
class ParsedArguments:
    verdict: Verdict
    arguments: dict[str, Any]
    """The parsed (and coerced) arguments; empty unless the verdict is ``ok``."""
    error: str = ""
    """Why parsing failed, in words the model can act on."""


def parse_arguments(raw: str, schema: Mapping[str, Any] | None = None) -> ParsedArguments:
    """Judge one call's argument text and coerce it to ``schema`` where that is unambiguous."""
    text = raw.strip()
    if not text:
        return ParsedArguments("ok", {})  # models send "" for "no arguments"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        # A reply cut off by the token limit never closes its JSON; retrying would cut it again.
        if not text.endswith(("}", "]")) and exc.msg != "Extra data":
            return ParsedArguments("truncated", {}, f"arguments end mid-JSON ({exc.msg})")
        return ParsedArguments(
            "invalid",
            {},
            f"Invalid JSON arguments: {exc.msg} at character {exc.pos}. "
            "Send a JSON object; for a tool without required parameters send {}.",
        )
    if not isinstance(value, dict):
        return ParsedArguments(
            "invalid", {}, f"Arguments must be a JSON object, not {_json_type(value)}."
        )
    return ParsedArguments("ok", coerce(value, schema or {}))


def coerce(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """Fix scalar types the model got wrong ("42" for an integer, "true" for a boolean)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return arguments
    fixed = dict(arguments)
    for name, value in arguments.items():
        spec = properties.get(name)
        if isinstance(spec, Mapping):
            fixed[name] = _coerce_value(value, spec)
    return fixed


def _coerce_value(value: Any, spec: Mapping[str, Any]) -> Any:
    kind = spec.get("type")
    if isinstance(kind, list):  # e.g. ["integer", "null"]: coerce to the first concrete type
        kind = next((k for k in kind if k != "null"), None)
    if not isinstance(value, str):
        if kind == "object" and isinstance(value, dict):
            return coerce(value, spec)
        return value
    text = value.strip()
    try:
        if kind == "integer":
            if text.lstrip("+-").isdigit():
                return int(text)  # exact: a float would round integers beyond 2**53
            number = float(text)
            return int(number) if number.is_integer() else value
        if kind == "number":
            return float(text)
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind in ("array", "object") and text[:1] in ("[", "{"):
            parsed = json.loads(text)
            if isinstance(parsed, list if kind == "array" else dict):
                return parsed
    except ValueError:
        pass
    return value


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``null``, ``array``, ``string``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"
