"""Bearer API keys. Each key is a principal; a principal sees only its own runs and sessions."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from fastapi import Request

from server.errors import APIError

LOCAL_PRINCIPAL = "local"


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    profiles: frozenset[str] | None = None
    """The profile ids this principal may use; None allows every profile."""

    def may_use(self, profile_id: str) -> bool:
        return self.profiles is None or profile_id in self.profiles


class KeyRing:
    """The configured keys. With none, every caller is the local principal (loopback only).

    ``keys`` maps a key to its principal's name, or to a Principal (to restrict its profiles).
    """

    def __init__(self, keys: Mapping[str, str | Principal] | None = None) -> None:
        self._keys = [
            (key.encode(), who if isinstance(who, Principal) else Principal(who))
            for key, who in (keys or {}).items()
        ]

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not self._keys:
            return Principal(LOCAL_PRINCIPAL)
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        offered = authorization[7:].strip().encode()
        found: Principal | None = None
        # Compare against every key, always: the time taken says nothing about which matched.
        for key, principal in self._keys:
            if hmac.compare_digest(offered, key):
                found = principal
        return found


async def require_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller's principal, or a 401 in the OpenAI envelope.

    ``async`` on purpose: FastAPI runs a plain-function dependency in a worker thread, a
    thread hop per request for work that never blocks.
    """
    keyring: KeyRing = request.app.state.services.keyring
    principal = keyring.authenticate(request.headers.get("authorization"))
    if principal is None:
        raise APIError(
            401,
            "Incorrect or missing API key. Send it as 'Authorization: Bearer <key>'.",
            code="invalid_api_key",
        )
    return principal
