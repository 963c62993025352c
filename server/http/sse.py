"""SSE encoding for the OpenAI endpoints: one ``data:`` line per frame, ``\\n`` line endings.

Frames are encoded here, once, as bytes, and sent by sse-starlette's response, made and run
more cheaply here (one task and a timer instead of its task group of four): it adds
``: keep-alive`` comments while a run is quiet (tools running), and stops when the client goes
away or the server shuts down.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import AppStatus, _ensure_watcher_started_on_this_loop, _get_shutdown_state
from starlette.types import Message, Receive, Scope, Send

from hermes_core import json_codec

DONE = b"data: [DONE]\n\n"
KEEPALIVE_SECONDS = 15


def data_frame(payload: Mapping[str, Any]) -> bytes:
    """``data: {json}`` — never an ``event:`` or ``id:`` line (they break OpenAI SDK parsers)."""
    return b"data: " + json_codec.dumps(payload) + b"\n\n"


def named_frame(event: str, payload: Mapping[str, Any]) -> bytes:
    """``event: <type>`` + ``data:``; only for the Responses and native run-event streams."""
    return b"event: " + event.encode() + b"\ndata: " + json_codec.dumps(payload) + b"\n\n"


class _EventSource(EventSourceResponse):
    """sse-starlette's response, with its four jobs done by one task and a timer.

    The library runs four tasks in an anyio task group per response (send the frames, ping,
    stop on shutdown, stop when the client leaves), the first to end cancelling the others.
    Here the frames are sent by the response's own task; one task listens for the client
    leaving; the shutdown reaches the stream through the library's own shutdown watcher (which
    sets every waiter it holds, here an object that stops the stream), and a ping is a timer
    that starts a send only when one is due (a run quiet for that long: tools working). Either
    stop cancels the sending task, which closes the frames, as the task group's cancellation
    does. (The library's task group cost a 20-chunk stream ~0.6 M instructions of 5.45 M, #27.)

    Also no cancel scope around every send when no send timeout is set (as here): entering and
    leaving an anyio scope costs ~8 µs, paid for every chunk of every stream, to enforce a
    timeout of None."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plain = scope["type"] == "http" and scope["method"].upper() != "HEAD"
        if (
            not plain
            or self.data_sender_callable is not None
            or self.ping_interval <= 0
            or self.ping_message_factory is None
            or AppStatus.should_exit  # the library's way: the stream ends at once
        ):
            await super().__call__(scope, receive, send)
            return
        sending = asyncio.current_task()
        assert sending is not None
        stop = _Stop(sending)
        loop = asyncio.get_running_loop()
        _ensure_watcher_started_on_this_loop()
        waiters: set[Any] = _get_shutdown_state().events
        waiters.add(stop)
        listening = loop.create_task(self._until_client_leaves(receive, stop))
        pinging = _Pings(self, send, stop, loop)
        try:
            await self._stream_response(send)
        except asyncio.CancelledError:
            # Ours ends the response as the library's does (the frames were closed either way:
            # the cancellation went through them, or _stream_response closed them).
            if not stop.fired or sending.uncancel() > 0:
                raise  # not (only) ours: the server's, or the caller's
        finally:
            self.active = False
            waiters.discard(stop)
            listening.cancel()
            pinging.cancel()
        if self.background is not None:
            await self.background()

    async def _until_client_leaves(self, receive: Receive, stop: _Stop) -> None:
        await self._listen_for_disconnect(receive)
        stop.set()


class _Stop:
    """Stops a stream by cancelling the task sending it, once. The library's shutdown watcher
    calls ``set()`` on every waiter it holds."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False

    def set(self) -> None:
        if not self.fired:
            self.fired = True
            self.task.cancel()


class _Pings:
    """A keep-alive comment every ``ping_interval`` seconds while the response is active: a
    timer, and a task only for a ping's own send."""

    def __init__(
        self, response: _EventSource, send: Send, stop: _Stop, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._response = response
        self._send = send
        self._stop = stop
        self._loop = loop
        self._sending: asyncio.Task[None] | None = None
        self._timer = loop.call_later(response.ping_interval, self._due)

    def _due(self) -> None:
        self._sending = self._loop.create_task(self._ping())
        self._timer = self._loop.call_later(self._response.ping_interval, self._due)

    async def _ping(self) -> None:
        response = self._response
        factory = response.ping_message_factory
        assert factory is not None
        message = {"type": "http.response.body", "body": factory().encode(), "more_body": True}
        try:
            async with response._send_lock:
                if response.active:
                    await response._send_with_timeout(self._send, message)
        except Exception:
            self._stop.set()  # as a failed ping ends the library's response

    def cancel(self) -> None:
        self._timer.cancel()
        if self._sending is not None:
            self._sending.cancel()


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep="\n")


def sse_response(
    frames: AsyncIterator[bytes],
    *,
    headers: dict[str, str],
    keepalive_seconds: float = KEEPALIVE_SECONDS,
) -> EventSourceResponse:
    """The response the library's constructor would make of these arguments, made directly:
    its constructor merges the headers through Starlette's header objects, creates an anyio
    lock (which looks the async library up) and checks the content against an ABC, ~3 % of a
    20-chunk stream's CPU (cProfile)."""
    response = _EventSource.__new__(_EventSource)
    response.body_iterator = frames
    response.sep = "\n"
    response.status_code = 200
    response.media_type = "text/event-stream"
    response.background = None
    response.data_sender_callable = None
    response.send_timeout = None
    response.raw_headers = _raw_headers(headers)
    response.ping_interval = keepalive_seconds
    response.ping_message_factory = _keepalive
    response.client_close_handler_callable = None
    response._shutdown_event = None
    response._shutdown_grace_period = 0
    response._cleanup_timeout = EventSourceResponse.DEFAULT_CLEANUP_TIMEOUT
    response.active = True
    response._send_lock = asyncio.Lock()  # type: ignore[assignment]  # the same use, on asyncio
    return response


def _raw_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    """The headers as the library's constructor sets them: ours, the caller's over them (by
    name, whatever its case), its own defaults, and the media type."""
    merged: dict[str, str] = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    for name, value in headers.items():
        merged[name.lower()] = value
    merged.setdefault("cache-control", "no-store")
    merged["connection"] = "keep-alive"
    merged["x-accel-buffering"] = "no"
    merged.setdefault("content-type", "text/event-stream; charset=utf-8")
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in merged.items()]
