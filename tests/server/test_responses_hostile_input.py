"""Malformed and hostile input to the Responses endpoints: always a 4xx with the OpenAI error
envelope, never a 500 or a hang, and nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from server.http.threaded import ThreadedServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE

M = "hermes-agent"
BAD_BODIES: list[Any] = [
    {},
    {"model": M, "input": "hi", "stream": "yes"},
    {"model": M, "input": "hi", "store": "no"},
    {"model": ""},
    {"model": M, "input": 42},
    {"model": M, "input": [42]},
    {"model": M, "input": [{"type": "message", "role": "wizard", "content": "hi"}]},
    {"model": M, "input": [{"type": "message", "role": "user", "content": 5}]},
    {"model": M, "input": [{"type": "message", "role": "user", "content": [{"type": "x"}]}]},
    {"model": M, "input": [{"type": "function_call", "name": "f"}]},
    {"model": M, "input": [{"type": "function_call_output", "output": "x"}]},
    {"model": M, "input": [{"type": "item_reference", "id": "msg_1"}]},
    {"model": M, "input": [{"type": "compaction", "encrypted_content": "hermes.v1.!!!"}]},
    {"model": M, "input": [{"type": "compaction", "encrypted_content": None}]},
    {"model": M, "input": [{"type": "nonsense"}]},
    {"model": M, "input": "hi", "tools": "all of them"},
    {"model": M, "input": "hi", "tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]},
    {"model": M, "input": "hi", "tools": [{"type": "function", "name": "bad name!"}]},
    {"model": M, "input": "hi", "tool_choice": {"type": "mystery"}},
    {"model": M, "input": "hi", "metadata": {f"k{i}": "v" for i in range(17)}},
    {"model": M, "input": "hi", "metadata": {"k": "v" * 513}},
    {"model": M, "input": "hi", "max_output_tokens": 0},
    {"model": M, "input": "hi", "temperature": 9},
    {"model": M, "input": "hi", "background": True, "store": False},
    {"model": M, "input": "hi", "conversation": "conv_1"},
    {"model": M, "input": "hi", "text": {"format": {"type": "json_schema"}}},
    {"model": M, "input": "hi", "previous_response_id": 7},
    {"model": "no-such-model", "input": "hi"},
    {"model": M, "input": "hi", "previous_response_id": "resp_missing"},
]


@pytest.fixture
async def http(hermes: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {KEY_ALICE}"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=headers, timeout=10
    ) as client:
        yield client


def _is_envelope(response: httpx.Response) -> bool:
    body = response.json()
    return set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"])


@pytest.mark.parametrize("body", BAD_BODIES)
async def test_a_bad_create_request_is_a_4xx_with_the_envelope(
    http: httpx.AsyncClient, body: Any
) -> None:
    for path in ("/v1/responses", "/v1/responses/compact"):
        response = await http.post(path, json=body)
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text)
        assert _is_envelope(response)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/responses/resp_missing"),
        ("GET", "/v1/responses/resp_missing?stream=true"),
        ("GET", "/v1/responses/resp_missing?starting_after=-5"),
        ("GET", "/v1/responses/resp_missing?starting_after=abc"),
        ("DELETE", "/v1/responses/resp_missing"),
        ("POST", "/v1/responses/resp_missing/cancel"),
        ("GET", "/v1/responses/resp_missing/input_items"),
        ("GET", "/v1/responses/resp_missing/input_items?limit=0"),
        ("GET", "/v1/responses/resp_missing/input_items?order=sideways"),
        ("PUT", "/v1/responses"),
    ],
)
async def test_bad_companion_requests_are_4xx_with_the_envelope(
    http: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await http.request(method, path)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert _is_envelope(response)


async def test_a_body_that_is_not_json_is_a_400(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/v1/responses", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert _is_envelope(response)


async def test_without_a_key_every_responses_route_is_a_401(hermes: ThreadedServer) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as anonymous:
        for method, path in (
            ("POST", "/v1/responses"),
            ("GET", "/v1/responses/resp_x"),
            ("DELETE", "/v1/responses/resp_x"),
            ("POST", "/v1/responses/resp_x/cancel"),
            ("GET", "/v1/responses/resp_x/input_items"),
            ("POST", "/v1/responses/compact"),
        ):
            response = await anonymous.request(method, path, json={"model": M, "input": "x"})
            assert response.status_code == 401, (method, path)
            assert _is_envelope(response)
