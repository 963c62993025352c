"""Shapes every endpoint shares: the base models, the error envelope, usage details, the
``hermes`` summary and client tool calls."""

from __future__ import annotations

from typing import Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import SkipJsonSchema

from hermes_core.events import ExitReason

_T = TypeVar("_T")
Omittable: TypeAlias = _T | SkipJsonSchema[None]
"""A key that is sometimes absent: documented as ``X`` and not required."""


class Shape(BaseModel):
    """A closed object: exactly the keys listed."""

    model_config = ConfigDict(use_attribute_docstrings=True)


class Open(BaseModel):
    """An object that may carry more keys than listed."""

    model_config = ConfigDict(use_attribute_docstrings=True, extra="allow")


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
