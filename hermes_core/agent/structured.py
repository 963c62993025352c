"""Structured outputs: telling the model the shape its final answer must take, and checking
that the answer has it.

The upstream is asked for the shape natively where it can enforce one (``OutputFormat`` on
every model call); the instructions say it too, for upstreams that cannot. Then the answer is
checked here, whatever the upstream promised: a mismatch gets one repair call that names what
is wrong, and a second mismatch fails the run honestly — a non-conforming answer is never
reported as a success.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hermes_core.providers.base import OutputFormat

_FENCED = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?```$", re.DOTALL)


class InvalidSchema(ValueError):
    """A request's JSON Schema that is not one; its message says why."""


def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise :class:`InvalidSchema` unless ``schema`` is a valid JSON Schema."""
    # jsonschema is loaded by the first request that asks for a schema, not by every start.
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(dict(schema))
    except exceptions.SchemaError as exc:
        raise InvalidSchema(f"not a valid JSON Schema: {exc.message}") from exc


def format_instructions(output: OutputFormat) -> str:
    """What the system prompt says about the answer's shape."""
    if output.kind == "json_object":
        shape = "a JSON object"
    else:
        schema = json.dumps(output.schema, ensure_ascii=False, separators=(",", ":"))
        shape = f"JSON matching this JSON Schema ({output.name}): {schema}"
    return (
        f"The user needs a structured answer. Your final answer must be only {shape}. "
        "No prose before or after it, no code fences. Call tools first if you need them."
    )


def check_answer(text: str, output: OutputFormat) -> tuple[str, str | None]:
    """``(answer, None)`` when ``text`` is the JSON asked for (code fences around it taken
    off); else ``(text, what is wrong)``, in words the model can act on."""
    candidate = text.strip()
    fenced = _FENCED.match(candidate)
    if fenced:
        candidate = fenced.group(1).strip()
    try:
        value = json.loads(candidate)
    except ValueError as exc:
        return text, f"it is not valid JSON ({exc})"
    if output.kind == "json_object":
        if not isinstance(value, dict):
            return text, "it is JSON, but not a JSON object"
        return candidate, None
    from jsonschema import exceptions, validators

    schema = dict(output.schema or {})
    validator = validators.validator_for(schema)(schema)
    error = exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "the top level"
        return text, f"at {where}: {error.message}"
    return candidate, None


def repair_note(output: OutputFormat, problem: str) -> str:
    """The user turn that asks for the answer again, once."""
    return (
        f"[Your answer does not have the required shape ({output.name}): {problem}. "
        "Reply again with only the JSON, nothing else.]"
    )
