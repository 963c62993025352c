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


class KeyRing:
    """The configured keys. With none, every caller is the local principal (loopback only)."""

    def __init__(self, keys: Mapping[str, str] | None = None) -> None:
        self._keys = [(key.encode(), principal) for key, principal in (keys or {}).items()]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not self._keys:
            return Principal(LOCAL_PRINCIPAL)
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        offered = authorization[7:].strip().encode()
        found: str | None = None
        # Compare against every key, always: the time taken says nothing about which matched.
        for key, principal in self._keys:
            if hmac.compare_digest(offered, key):
                found = principal
        return Principal(found) if found is not None else None


def require_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller's principal, or a 401 in the OpenAI envelope."""
    keyring: KeyRing = request.app.state.services.keyring
    principal = keyring.authenticate(request.headers.get("authorization"))
    if principal is None:
        raise APIError(
            401,
            "Incorrect or missing API key. Send it as 'Authorization: Bearer <key>'.",
            code="invalid_api_key",
        )
    return principal
