"""SSE encoding for the OpenAI endpoints: one ``data:`` line per frame, ``\\n`` line endings.

Frames are encoded here, once, as bytes; sse-starlette sends them, adds ``: keep-alive``
comments while a run is quiet (tools running), and notices a client that went away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Mapping
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
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
    """sse-starlette's response, minus a cancel scope around every send when no send timeout is
    set (as here): entering and leaving an anyio scope costs ~8 µs, paid for every chunk of
    every stream, to enforce a timeout of None.

    Its four jobs (send the frames, ping, stop on shutdown, stop when the client leaves) run as
    plain asyncio tasks, the first to end cancelling the others, as the library's anyio task
    group does: the task group's spawns, cancel scopes and async-library sniffing cost a
    20-chunk stream ~0.6 M instructions of 5.45 M (#27). For the same reason the pings wait
    on asyncio's sleep and the sends share an asyncio lock: anyio's look the async library up
    on every call, and its lock yields to the loop even when free."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)

    async def _ping(self, send: Send) -> None:
        if self.ping_message_factory is None:
            await super()._ping(send)
            return
        while self.active:
            await asyncio.sleep(self.ping_interval)
            ping = self.ping_message_factory().encode()
            async with self._send_lock:
                if self.active:
                    message = {"type": "http.response.body", "body": ping, "more_body": True}
                    await self._send_with_timeout(send, message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        plain = scope["type"] == "http" and scope["method"].upper() != "HEAD"
        if not plain or self.data_sender_callable is not None or self.ping_interval <= 0:
            await super().__call__(scope, receive, send)
            return
        jobs: list[Coroutine[Any, Any, None]] = [
            self._stream_response(send),
            self._ping(send),
            self._listen_for_exit_signal_with_grace(),
            self._listen_for_disconnect(receive),
        ]
        self._send_lock = asyncio.Lock()  # type: ignore[assignment]  # the same use, on asyncio
        tasks = [asyncio.ensure_future(job) for job in jobs]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await _settle(tasks)
        errors = [task.exception() for task in tasks if not task.cancelled()]
        for error in errors:
            if error is not None:
                raise error
        if self.background is not None:
            await self.background()


async def _settle(tasks: list[asyncio.Task[None]]) -> None:
    """Wait until every task has ended, even if this waiter is cancelled meanwhile (the tasks
    were cancelled already; like a task group, do not return before they are done)."""
    pending = [task for task in tasks if not task.done()]
    cancelled = False
    while pending:
        try:
            await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
        pending = [task for task in pending if not task.done()]
    if cancelled:
        raise asyncio.CancelledError


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive", sep="\n")


def sse_response(
    frames: AsyncIterator[bytes],
    *,
    headers: dict[str, str],
    keepalive_seconds: float = KEEPALIVE_SECONDS,
) -> EventSourceResponse:
    return _EventSource(
        frames,
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **headers},
        sep="\n",
        ping=keepalive_seconds,
        ping_message_factory=_keepalive,
    )
