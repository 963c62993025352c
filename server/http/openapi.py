"""The OpenAPI document: what routes that answer with hand-built responses send, and errors.

Routes declare their answers with :func:`success` and :func:`errors` in ``responses=``;
:func:`install_openapi` adds the schemas of the SSE event models, which FastAPI does not know
(no route returns them as a model), to the document's components.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from server.protocol.schemas.chat import ChatCompletionChunk
from server.protocol.schemas.common import ErrorEnvelope
from server.protocol.schemas.responses import ResponseStreamEvent
from server.protocol.schemas.runs import RunEvent

REF_TEMPLATE = "#/components/schemas/{model}"
STREAMED: tuple[type[BaseModel], ...] = (ChatCompletionChunk, ResponseStreamEvent, RunEvent)
"""The models of SSE frames; :func:`sse` may name only these."""

_ERRORS = {
    400: "Invalid request: a field, parameter or header (validation errors are 400, never 422).",
    401: "Missing or wrong API key.",
    403: "This API key may not use the model.",
    404: "Not found for this API key (model, response, run, file or workspace).",
    409: "Conflicts with the state of the response, run or session.",
    413: "The request body is too large, or a file beyond the key's quota.",
    424: "A request's MCP server (an ``mcp`` tool) could not be reached or listed.",
    429: "Too many runs of this API key at once; ``retry-after`` says when to retry.",
    502: "The upstream model failed before producing any output.",
    503: "Not ready to serve.",
}


BYTES: dict[str, Any] = {
    "description": "The file's bytes.",
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}
"""The ``responses=`` entry of a route that answers a file's bytes."""


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries: ``statuses`` and every other error (``default``, e.g. a 500),
    all in the error envelope.

    ``default`` also keeps FastAPI from documenting its own 422 ``HTTPValidationError``, which
    this server never sends (``server/errors.py`` answers validation errors with a 400).
    """
    entries: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorEnvelope, "description": _ERRORS[status]} for status in statuses
    }
    if 429 in entries:
        entries[429]["headers"] = {
            "retry-after": {"description": "Seconds to wait.", "schema": {"type": "integer"}}
        }
    entries["default"] = {"model": ErrorEnvelope, "description": "Any other error."}
    return entries


def sse(model: type[BaseModel]) -> dict[str, Any]:
    """The ``content`` of an SSE stream whose frames carry ``model``, one per ``data:`` line."""
    if model not in STREAMED:
        raise ValueError(f"{model.__name__} is not in STREAMED: the document would lack it")
    return {"text/event-stream": {"schema": {"$ref": REF_TEMPLATE.format(model=model.__name__)}}}


def success(
    model: type[BaseModel] | None, description: str, *, stream: type[BaseModel] | None = None
) -> dict[str, Any]:
    """One ``responses=`` entry: ``model`` as JSON and/or an SSE stream of ``stream`` frames."""
    entry: dict[str, Any] = {"description": description}
    if model is not None:
        entry["model"] = model
    if stream is not None:
        entry["content"] = sse(stream)
    return entry


@functools.cache
def _streamed_schemas() -> dict[str, Any]:
    """The SSE frame models' schemas, normalised as FastAPI normalises its own (which drops,
    e.g., ``"default": null``). Built once, on the first ask for the document: building them
    costs ~25 ms of CPU, which neither a starting server nor a test's app should pay."""
    _, top = models_json_schema(
        [(model, "serialization") for model in STREAMED], ref_template=REF_TEMPLATE
    )
    return {
        name: jsonable_encoder(Schema(**schema), by_alias=True, exclude_none=True)
        for name, schema in top["$defs"].items()
    }


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` also document the SSE frame models."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        document = generate()  # FastAPI's own, cached on the app
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in _streamed_schemas().items():
            if schemas.setdefault(name, schema) != schema:
                raise RuntimeError(f"two different schemas are both named {name!r}")
        return document

    # FastAPI's documented way to extend the document.
    app.openapi = openapi  # type: ignore[method-assign]
