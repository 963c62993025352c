"""The SSE encoder (server/sse.py), against the library it builds on.

``_EventSource`` overrides a private method of sse-starlette to skip a cancel scope per chunk.
If a new sse-starlette renames or reshapes that method, the override silently stops working
(only speed is lost): these tests make that loud.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from sse_starlette.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from server.sse import DONE, _EventSource, data_frame, sse_response


def test_the_overridden_method_still_exists_with_the_same_signature() -> None:
    ours = inspect.signature(_EventSource._send_with_timeout)
    theirs = inspect.signature(EventSourceResponse._send_with_timeout)
    assert list(ours.parameters) == list(theirs.parameters) == ["self", "send", "message"]


async def test_frames_are_sent_without_a_cancel_scope_per_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scopes: list[Any] = []
    real = anyio.move_on_after

    def counting(*args: Any, **kwargs: Any) -> Any:
        scopes.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(anyio, "move_on_after", counting)  # the module sse-starlette calls

    async def frames() -> AsyncIterator[bytes]:
        for number in range(5):
            yield data_frame({"n": number})
        yield DONE

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await sse_response(frames(), headers={}, keepalive_seconds=60)(scope, receive, send)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/")
    assert response.text == "".join(f'data: {{"n":{n}}}\n\n' for n in range(5)) + "data: [DONE]\n\n"
    assert scopes == []  # the library would enter one per send: the override is in use
