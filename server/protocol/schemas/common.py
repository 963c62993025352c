"""Shapes every endpoint shares: the base models, the error envelope, usage details, the
``hermes`` summary and client tool calls."""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import SkipJsonSchema

from hermes_core.events import ExitReason

_T = TypeVar("_T")
Omittable: TypeAlias = _T | SkipJsonSchema[None]
"""A key that is sometimes absent: documented as ``X`` and not required."""


@functools.cache
def _attribute_docstrings(module: str) -> dict[str, dict[str, str]]:
    """Each top-level class of ``module``: its attributes' docstrings (a string right after
    an annotated attribute), read from one parse of the module's source."""
    classes: dict[str, dict[str, str]] = {}
    for node in ast.parse(inspect.getsource(sys.modules[module])).body:
        if isinstance(node, ast.ClassDef):
            docs = classes[node.name] = {}
            for before, statement in zip(node.body, node.body[1:], strict=False):
                if (
                    isinstance(before, ast.AnnAssign)
                    and isinstance(before.target, ast.Name)
                    and isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    docs[before.target.id] = inspect.cleandoc(statement.value.value)
    return classes


class _Described(BaseModel):
    """A model whose attributes' docstrings describe its fields in the OpenAPI document.

    What pydantic's ``use_attribute_docstrings`` does, for less (#27): pydantic finds each
    class's source by walking the frames of its definition and resolving each frame's module
    through the file system (``inspect.getmodule``: a realpath per frame), then tokenises the
    class again; for these ~60 models that was ~50 ms of a start. This parses each module
    once. The schema is built once the descriptions are set (``defer_build``, then
    ``model_rebuild``), not twice.

    ``defer_build`` stays in the models' config, so FastAPI's adapters of a route's models
    (~190 of them, the error envelope of every status of every route) are built at their
    first use, not at start: the document and a route's first answer build theirs.
    """

    model_config = ConfigDict(defer_build=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        docs = _attribute_docstrings(cls.__module__).get(cls.__name__, {})
        for name, field in cls.__pydantic_fields__.items():
            if field.description is None and name in docs:
                field.description = docs[name]
        # As pydantic would at the class's creation: the names its annotations use are the
        # module's as they stand then (one defined later: built at first use, as pydantic does).
        cls.model_rebuild(force=True, raise_errors=False, _parent_namespace_depth=0)


class Shape(_Described):
    """A closed object: exactly the keys listed."""


class Open(_Described):
    """An object that may carry more keys than listed."""

    model_config = ConfigDict(extra="allow")


# --- errors ---------------------------------------------------------------------------------------


class ErrorBody(Shape):
    message: str
    """What went wrong, readable by a person."""
    type: str
    """``invalid_request_error``, ``authentication_error``, ``permission_error``,
    ``not_found_error``, ``conflict_error``, ``rate_limit_error``, ``server_error``, …"""
    param: str | None
    """The request field or header at fault, if one is."""
    code: str | None
    """A stable machine-readable code, e.g. ``model_not_found``, ``rate_limit_exceeded``."""


class ErrorEnvelope(Shape):
    """Every error the server answers, whatever its status: OpenAI's error envelope."""

    error: ErrorBody


# --- shared pieces --------------------------------------------------------------------------------


class HermesSummary(Shape):
    """The ``hermes`` extension object: how the agent run really ended."""

    run_id: str
    """The run, for ``/v1/runs/{run_id}``."""
    session_id: str | None
    """The server-side session the run continued, if any."""
    exit_reason: ExitReason
    iterations: int
    """Agent loop iterations (model calls that could call tools)."""
    model_calls: int
    """Model calls in all, retries and fallbacks included."""
    cost_usd: float
    """What the run's model calls cost in US dollars at the configured prices (``prices``),
    its sub-agents' and summaries' included; 0 when its models are unpriced."""
    error: str | None
    """What went wrong when the run did not complete."""


class InputTokensDetails(Shape):
    cached_tokens: int
    """Part of the input read from the provider's prompt cache."""
    cache_write_tokens: int
    """Part of the input written to the provider's prompt cache."""


class OutputTokensDetails(Shape):
    reasoning_tokens: int
    """Part of the output spent on reasoning."""


class FunctionCall(Shape):
    name: str
    arguments: str
    """The arguments as a JSON string."""


class ToolCall(Shape):
    """A call of a tool the client declared: the client runs it and sends the result back."""

    id: str
    type: Literal["function"]
    function: FunctionCall
