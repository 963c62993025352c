"""A WebSocket upgrade to ``/v1/responses`` without a valid key: refused at the handshake with
the 401 and ``invalid_api_key`` envelope plain HTTP gets, which the official SDK's
``responses.connect()`` surfaces (``websockets``' ``InvalidStatus``, whose ``response`` holds
the status and body)."""

from __future__ import annotations

import json

import openai
import pytest
from websockets.exceptions import InvalidStatus

from server.http.threaded import ThreadedServer
from tests.plain_http import TLS_UNUSED

pytestmark = pytest.mark.slow


async def test_a_socket_with_a_bad_key_gets_the_401_envelope(hermes: ThreadedServer) -> None:
    async with openai.AsyncOpenAI(
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS_UNUSED),
        base_url=hermes.base_url + "/v1",
        api_key="sk-wrong",
        max_retries=0,
    ) as wrong:
        with pytest.raises(InvalidStatus) as refused:
            await wrong.responses.connect(max_retries=0).enter()
    answer = refused.value.response
    assert answer.status_code == 401
    assert answer.headers["content-type"] == "application/json"
    error = json.loads(answer.body)["error"]
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "authentication_error"
