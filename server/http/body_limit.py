"""Request body size limit, enforced before any route parses the body."""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import error_response

UPLOAD_ENVELOPE_BYTES = 1024 * 1024
"""What a multipart upload may add to its file's size (boundaries, part headers, fields)."""


class BodySizeLimit:
    """Answer 413 for bodies over the limit ``limit_of`` gives a request's path, whether
    announced or streamed."""

    def __init__(self, app: ASGIApp, *, limit_of: Callable[[str], int]) -> None:
        self.app = app
        self.limit_of = limit_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_of(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await self._refuse(scope, receive, send, limit)
            return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counting_receive, send)
        except _TooLarge:
            await self._refuse(scope, receive, send, limit)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        await too_large(limit)(scope, receive, send)


def too_large(limit: int) -> Response:
    """The answer to a body over ``limit`` bytes."""
    return error_response(
        413, f"The request body is larger than {limit} bytes.", code="body_too_large"
    )


class _TooLarge(Exception):
    pass
