"""Every /v1/ request needs a key, checked before anything else is read; probes need none."""

from __future__ import annotations

import httpx
import pytest

from server.http.threaded import ThreadedServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", b"{not json"),
        ("POST", "/v1/chat/completions", b'{"model": "hermes-agent", "messages": []}'),
        ("POST", "/v1/responses", b"\xff\xfe garbage"),
        ("POST", "/v1/responses/compact", b"{}"),
        ("GET", "/v1/models", b""),
        ("GET", "/v1/runs/run_x/events", b""),
        ("POST", "/v1/no-such-route", b""),
    ],
)
async def test_a_request_without_a_key_is_a_401_whatever_its_body(
    hermes: ThreadedServer, method: str, path: str, body: bytes
) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        answer = await http.request(
            method, path, content=body, headers={"content-type": "application/json"}
        )
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "invalid_api_key"


async def test_a_malformed_body_with_a_key_is_a_400(hermes: ThreadedServer) -> None:
    headers = {"authorization": f"Bearer {KEY_ALICE}", "content-type": "application/json"}
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        answer = await http.post("/v1/chat/completions", content=b"{not json", headers=headers)
    assert answer.status_code == 400


@pytest.mark.parametrize("path", ["/health", "/ready", "/metrics", "/openapi.json"])
async def test_probes_and_the_document_need_no_key(hermes: ThreadedServer, path: str) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=hermes.base_url) as http:
        assert (await http.get(path)).status_code == 200
