"""Routes of what a key shares with all of its end users (docs/end-users.md), which only the
key itself may change: a request naming an end user is refused there, whoever they are."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request

from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.serving.end_users import end_user_of


def key_alone(refusal: str) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the caller's principal, for a request that names no end user; a
    403 ``end_user_not_allowed`` saying ``refusal`` for one that does."""

    async def require(request: Request) -> Principal:
        principal = await require_principal(request)
        if end_user_of(request, principal) is not None:
            raise APIError(403, refusal, code="end_user_not_allowed")
        return principal

    return require
