"""SSE encoding for the OpenAI endpoints: one ``data:`` line per frame, ``\\n`` line endings.

Frames are encoded here, once, as bytes; sse-starlette sends them, adds ``: keep-alive``
comments while a run is quiet (tools running), and notices a client that went away.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Message, Send

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
    every stream, to enforce a timeout of None."""

    async def _send_with_timeout(self, send: Send, message: Message) -> None:
        if self.send_timeout is None:
            await send(message)
        else:
            await super()._send_with_timeout(send, message)


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
