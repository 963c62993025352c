"""Bearer API keys. Each key is a principal; a principal sees only its own runs and sessions.

:class:`RequireKey` checks the key of every ``/v1/`` request before anything else is read
(health, readiness, metrics and the OpenAPI document need none): a request without a valid
key is a 401 whatever its body holds, as OpenAI answers it. The principal it found rides in the
ASGI scope's state for the routes (:func:`require_principal`) and the hot path."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import APIError, error_response

LOCAL_PRINCIPAL = "local"

SIGNED_PREFIX = "/v1/workspaces/signed/"
"""Where signed links point (server/files/links.py): the one file route that needs no API key."""


@dataclass(frozen=True, slots=True)
class Budget:
    """What a key, or each end user behind it, may spend (``api_keys[].budget``,
    ``limits``; docs/budgets.md): per UTC day in tokens, per UTC month in dollars."""

    tokens_per_day: int | None = None
    cost_per_month_usd: float | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    profiles: frozenset[str] | None = None
    """The profile ids this principal may use; None allows every profile."""
    trusted_front_end: bool = False
    """Its requests may name the end user they are for (``api_keys[].trusted_front_end``;
    the local principal, on a loopback server without keys, is trusted)."""
    admin: bool = False
    """May use the admin routes (``api_keys[].admin``)."""
    budget: Budget | None = None
    """The key's own budget (None: no limit)."""
    end_user_budget: Budget | None = None
    """The budget of each end user behind the key (None: no limit)."""

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

    def replace(self, other: KeyRing) -> None:
        """Take ``other``'s keys (a configuration reload), in one step."""
        self._keys = other._keys

    @property
    def empty(self) -> bool:
        return not self._keys

    def principal_named(self, name: str) -> Principal | None:
        """The principal called ``name`` as the keys configure it now (its profiles, trust and
        budgets), for work done on its behalf without a request: a cron's firing. None when no
        key names it any more (its key was removed from the configuration)."""
        if not self._keys:
            return _LOCAL if name == _LOCAL.name else None
        for _, principal in self._keys:
            if principal.name == name:
                return principal
        return None

    def authenticate(self, authorization: str | None) -> Principal | None:
        if not self._keys:
            return _LOCAL
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        offered = authorization[7:].strip().encode()
        found: Principal | None = None
        # Compare against every key, always: the time taken says nothing about which matched.
        for key, principal in self._keys:
            if hmac.compare_digest(offered, key):
                found = principal
        return found


_LOCAL = Principal(LOCAL_PRINCIPAL, trusted_front_end=True)
"""Every caller of a server without keys: it listens on loopback only, for one operator."""

API_PREFIX = "/v1/"
_MISSING_KEY = "Incorrect or missing API key. Send it as 'Authorization: Bearer <key>'."


def principal_of(scope: Scope) -> Principal | None:
    """The principal :class:`RequireKey` found for this request."""
    state = scope.get("state")
    return state.get("principal") if state else None


class RequireKey:
    """Pure-ASGI middleware: a 401 for any ``/v1/`` request without a valid key, before its
    body is read; otherwise the principal goes into ``scope["state"]["principal"]``."""

    def __init__(self, app: ASGIApp, *, keyring: KeyRing) -> None:
        self.app = app
        self.keyring = keyring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        # A signed file link carries its own authority (its token): browsers have no key.
        if path.startswith(API_PREFIX) and not path.startswith(SIGNED_PREFIX):
            principal = self.keyring.authenticate(_authorization(scope))
            if principal is None:
                response = error_response(401, _MISSING_KEY, code="invalid_api_key")
                await response(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def _authorization(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return str(value.decode("latin-1"))
    return None


async def require_principal(request: Request) -> Principal:
    """FastAPI dependency: the caller's principal (``RequireKey`` checked it), or a 401.

    ``async`` on purpose: FastAPI runs a plain-function dependency in a worker thread, a
    thread hop per request for work that never blocks.
    """
    principal = principal_of(request.scope)
    if principal is None:  # an app built without RequireKey
        keyring: KeyRing = request.app.state.services.keyring
        principal = keyring.authenticate(request.headers.get("authorization"))
    if principal is None:
        raise APIError(401, _MISSING_KEY, code="invalid_api_key")
    return principal


async def require_admin(request: Request) -> Principal:
    """FastAPI dependency: the caller's principal if its key is an admin key, else a 403
    (a 401 without a valid key)."""
    principal = await require_principal(request)
    if not principal.admin:
        raise APIError(
            403,
            "This route needs an admin API key (api_keys[].admin: true).",
            code="admin_key_required",
        )
    return principal
