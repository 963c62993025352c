"""Free-form JSON nested absurdly deep (a tool's parameters, an output schema, a field the
server does not know) is a 400 naming it, on Chat Completions and Responses: it was a 500 once
the run had begun (a copy of the request could not be serialized). A schema a model is really
given, nested a few dozen levels, still runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from server.http.threaded import ThreadedServer
from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE

M = "hermes-agent"
CHAT = {"model": M, "messages": [{"role": "user", "content": "hi"}]}
RESPONSE = {"model": M, "input": "hi"}


def schema(levels: int) -> dict[str, Any]:
    """An object schema nesting ``levels`` objects (twice as many JSON levels)."""
    nested: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        nested = {"type": "object", "properties": {"a": nested}}
    return nested


def function(levels: int) -> dict[str, Any]:
    return {"type": "function", "name": "f", "parameters": schema(levels)}


def json_schema(levels: int) -> dict[str, Any]:
    return {"type": "json_schema", "name": "s", "schema": schema(levels)}


DEEP = 150
TOO_DEEP: list[tuple[str, dict[str, Any], str]] = [
    ("/v1/responses", {**RESPONSE, "tools": [function(DEEP)]}, "tools"),
    ("/v1/responses", {**RESPONSE, "text": {"format": json_schema(DEEP)}}, "text"),
    ("/v1/responses", {**RESPONSE, "surprise": schema(DEEP)}, "surprise"),
    (
        "/v1/chat/completions",
        {**CHAT, "tools": [{"type": "function", "function": function(DEEP)}]},
        "tools",
    ),
    (
        "/v1/chat/completions",
        {**CHAT, "response_format": {"type": "json_schema", "json_schema": json_schema(DEEP)}},
        "response_format",
    ),
    ("/v1/chat/completions", {**CHAT, "surprise": schema(DEEP)}, "surprise"),
]


@pytest.fixture
async def http(hermes: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=headers, timeout=30
    ) as client:
        yield client


@pytest.mark.parametrize(("path", "body", "param"), TOO_DEEP, ids=[t[2] for t in TOO_DEEP])
async def test_json_nested_absurdly_deep_is_a_400_naming_where(
    http: httpx.AsyncClient, path: str, body: dict[str, Any], param: str
) -> None:
    answer = await http.post(path, json=body)

    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


async def test_a_tool_schema_nested_a_few_dozen_levels_still_runs(
    http: httpx.AsyncClient, simulator: SimulatorServer
) -> None:
    answer = await http.post("/v1/responses", json={**RESPONSE, "tools": [function(30)]})

    assert answer.status_code == 200, answer.text
