"""A value that fits a JSON Schema: what the simulator answers when a request asks for a
structured answer (``response_format``, ``text.format``, ``output_config.format``)."""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 12


def example_of(schema: dict[str, Any]) -> Any:
    """A small value valid against ``schema``: every property filled, the first choice of
    every choice, ``$ref``s resolved within the schema."""
    return _example(schema, schema, 0)


def _example(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return None
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference.startswith("#/"):
        target: Any = root
        for part in reference[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return _example(target, root, depth + 1)
    for given in ("const", "default"):
        if given in schema:
            return schema[given]
    if schema.get("enum"):
        return schema["enum"][0]
    for choice in ("anyOf", "oneOf", "allOf"):
        options = schema.get(choice)
        if options:
            usable = [o for o in options if o.get("type") != "null"] or options
            return _example(usable[0], root, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _of_type(str(kind), schema, root, depth)


def _of_type(kind: str, schema: dict[str, Any], root: dict[str, Any], depth: int) -> Any:
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _example(sub, root, depth + 1) for name, sub in properties.items()}
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            return []
        return [_example(items, root, depth + 1) for _ in range(max(1, schema.get("minItems", 1)))]
    scalars: dict[str, Any] = {
        "integer": int(schema.get("minimum", 1)),
        "number": float(schema.get("minimum", 1.5)),
        "boolean": True,
        "null": None,
    }
    if kind in scalars:
        return scalars[kind]
    text = "simulated"
    return text + "x" * max(0, int(schema.get("minLength", 0)) - len(text))
