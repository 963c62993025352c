"""How deep the free-form JSON of a request (tool schemas, output schemas, tool choices) may
nest: 64 levels of objects and arrays, far past any schema a model is given (OpenAI's own
limits are a few levels), and well short of where serializing a request's copy fails (pydantic
stops at 200 levels; Python's recursion before 1,000): deeper was a 500 after the run began."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from server.errors import APIError

MAX_JSON_DEPTH = 64


def refuse_deep(value: Any, param: str) -> None:
    """A 400 naming ``param`` if ``value`` nests objects and arrays (or models parsed from
    them) deeper than :data:`MAX_JSON_DEPTH`; looked at level by level, without recursion."""
    level, depth = [value], 0
    while level := [node for node in level if isinstance(node, dict | list | BaseModel)]:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            raise APIError(400, f"{param} nests deeper than {MAX_JSON_DEPTH} levels.", param=param)
        level = [child for node in level for child in _children(node)]


def _children(node: dict[str, Any] | list[Any] | BaseModel) -> Iterable[Any]:
    if isinstance(node, dict):
        return node.values()
    if isinstance(node, list):
        return node
    return [*node.__dict__.values(), *(node.model_extra or {}).values()]


def refuse_deep_fields(request: BaseModel, names: Iterable[str]) -> None:
    """:func:`refuse_deep` for the free-form fields ``names`` of ``request`` and for any
    field it keeps that its model does not name (extra fields are kept, and copied)."""
    for name in names:
        refuse_deep(getattr(request, name), name)
    for name, value in (request.model_extra or {}).items():
        refuse_deep(value, name)
