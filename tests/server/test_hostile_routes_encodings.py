"""JSON bodies in encodings other than UTF-8: refused with a 400 in the OpenAI envelope on every
JSON route. Python's parser reads UTF-16 and UTF-32 too, and there the escapes of text no store
can hold (a lone surrogate, NUL) went past the door's search for them, into a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from server.http.threaded import ThreadedServer
from tests.plain_http import TLS_UNUSED
from tests.server.conftest import KEY_ALICE

CRON = '{"schedule": "0 3 * * *", "timezone": "UTC", "model": "hermes-agent", "input": "x"}'
BODIES = {
    "/v1/crons": CRON.replace('"x"', '"a \\ud800"'),
    "/v1/runs": '{"model": "hermes-agent", "input": "x", "metadata": {"k": "\\u0000"}}',
    "/v1/responses": '{"model": "hermes-agent", "input": "a \\ud800"}',
    "/v1/chat/completions": (
        '{"model": "hermes-agent", "messages": [{"role": "user", "content": "\\ud800"}]}'
    ),
    "/v1/conversations": '{"metadata": {"k": "\\ud800"}}',
}
ENCODINGS = ["utf-16", "utf-16-le", "utf-16-be", "utf-32"]


@pytest.fixture
async def http(hermes: ThreadedServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"authorization": f"Bearer {KEY_ALICE}", "content-type": "application/json"}
    async with httpx.AsyncClient(
        verify=TLS_UNUSED, base_url=hermes.base_url, headers=headers, timeout=30
    ) as client:
        yield client


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("path", list(BODIES))
async def test_a_json_body_that_is_not_utf8_is_a_400_with_the_envelope(
    http: httpx.AsyncClient, path: str, encoding: str
) -> None:
    answer = await http.post(path, content=BODIES[path].encode(encoding))

    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert {"message", "type", "param", "code"} <= set(error)


async def test_a_utf8_body_with_a_byte_order_mark_is_still_read(http: httpx.AsyncClient) -> None:
    answer = await http.post("/v1/crons", content=CRON.encode("utf-8-sig"))

    assert answer.status_code == 200, answer.text
    assert answer.json()["input"] == "x"
    await http.delete(f"/v1/crons/{answer.json()['id']}")
