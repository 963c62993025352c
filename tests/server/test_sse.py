"""The SSE encoder (server/http/sse.py), against the library it builds on.

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
from sse_starlette.sse import AppStatus, EventSourceResponse
from starlette.types import Receive, Scope, Send

from server.http.sse import DONE, _EventSource, _keepalive, data_frame, sse_response


def test_the_overridden_method_still_exists_with_the_same_signature() -> None:
    ours = inspect.signature(_EventSource._send_with_timeout)
    theirs = inspect.signature(EventSourceResponse._send_with_timeout)
    assert list(ours.parameters) == list(theirs.parameters) == ["self", "send", "message"]


def test_the_response_is_what_the_librarys_constructor_makes() -> None:
    # sse_response sets the attributes itself (the constructor costs ~3 % of a stream): a new
    # sse-starlette that sets others, or sets them differently, must be looked at.
    async def frames() -> AsyncIterator[bytes]:
        yield DONE

    content = frames()
    headers = {"X-Hermes-Run-Id": "run_1", "cache-control": "no-transform", "x-other": "é"}
    ours = sse_response(content, headers=headers, keepalive_seconds=7)
    theirs = EventSourceResponse(
        content,
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **headers},
        sep="\n",
        ping=7,
        ping_message_factory=_keepalive,
    )
    assert ours.raw_headers == theirs.raw_headers
    assert vars(ours).keys() == vars(theirs).keys()
    for name in vars(theirs).keys() - {"_send_lock"}:
        assert getattr(ours, name) == getattr(theirs, name), name


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


async def test_a_client_that_leaves_ends_the_stream_and_closes_its_frames() -> None:
    closed = anyio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield data_frame({"n": 0})
            await anyio.sleep(60)  # a quiet run (tools working)
            yield DONE
        finally:
            closed.set()

    sent: list[Any] = []

    async def receive() -> Any:
        await anyio.sleep(0.05)
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    scope: Any = {"type": "http", "method": "POST", "path": "/"}
    with anyio.fail_after(5):
        await sse_response(frames(), headers={}, keepalive_seconds=60)(scope, receive, send)
    assert closed.is_set()
    assert [m.get("body") for m in sent[1:]] == [b'data: {"n":0}\n\n']


async def test_an_error_in_the_frames_reaches_the_caller() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield data_frame({"n": 0})
        raise RuntimeError("broken view")

    async def receive() -> Any:
        await anyio.sleep(60)

    async def send(message: Any) -> None:
        pass

    scope: Any = {"type": "http", "method": "POST", "path": "/"}
    with anyio.fail_after(5), pytest.raises(RuntimeError, match="broken view"):
        await sse_response(frames(), headers={}, keepalive_seconds=60)(scope, receive, send)


async def test_a_quiet_stream_gets_keepalive_comments() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield data_frame({"n": 0})
        await anyio.sleep(0.35)  # a quiet run (tools working)
        yield DONE

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await sse_response(frames(), headers={}, keepalive_seconds=0.1)(scope, receive, send)

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        response = await client.get("/")
    assert response.text.startswith('data: {"n":0}\n\n: keep-alive\n\n')
    assert response.text.endswith(": keep-alive\n\ndata: [DONE]\n\n")


async def test_a_server_shutting_down_ends_the_stream_and_closes_its_frames() -> None:
    closed = anyio.Event()
    started = anyio.Event()

    async def frames() -> AsyncIterator[bytes]:
        try:
            yield data_frame({"n": 0})
            started.set()
            await anyio.sleep(60)  # a quiet run (tools working)
            yield DONE
        finally:
            closed.set()

    async def receive() -> Any:
        await anyio.sleep(60)  # the client stays

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def shut_down() -> None:
        await started.wait()
        AppStatus.should_exit = True  # what the library's patched exit handler sets

    scope: Any = {"type": "http", "method": "POST", "path": "/"}
    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(shut_down)
                await sse_response(frames(), headers={}, keepalive_seconds=60)(scope, receive, send)
    finally:
        AppStatus.should_exit = False
    assert closed.is_set()
    assert [m.get("body") for m in sent[1:]] == [b'data: {"n":0}\n\n']


async def test_the_caller_cancelling_the_stream_is_not_swallowed() -> None:
    async def frames() -> AsyncIterator[bytes]:
        yield data_frame({"n": 0})
        await anyio.sleep(60)
        yield DONE

    async def receive() -> Any:
        await anyio.sleep(60)

    async def send(message: Any) -> None:
        pass

    scope: Any = {"type": "http", "method": "POST", "path": "/"}
    with anyio.move_on_after(0.1) as scope_of_caller:
        await sse_response(frames(), headers={}, keepalive_seconds=60)(scope, receive, send)
    assert scope_of_caller.cancelled_caught
