"""Who a request is for: the end user behind its API key, when the key may name one.

One key often serves many people (an Open WebUI in front of the server). A key marked
``trusted_front_end`` may say which of them a request is for, and each end user then has their
own memory, sessions, session search, agent-written skills, workspaces and files, their own
run limit and budget (docs/end-users.md). The ways to name one, first found wins:

1. ``X-Hermes-Memory-Scope`` — ours, for any client;
2. ``X-OpenWebUI-User-Id`` — Open WebUI's, with ``ENABLE_FORWARD_USER_INFO_HEADERS`` (its
   ``-Name``, ``-Email`` and ``-Role`` headers are kept for display);
3. the body's ``safety_identifier``, then ``user`` — OpenAI's fields for the same thing.

A key that is not trusted may not name end users: our header is refused (403), since a
client sending it expects its data kept apart; Open WebUI's headers and the body's fields
are ignored (an Open WebUI or an SDK sends them unasked), and a warning says so once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from server.errors import APIError
from server.http.auth import Principal
from server.sessions.service import MAX_NAME_LENGTH, valid_name

log = logging.getLogger("hermes.end_users")

SCOPE_HEADER = "x-hermes-memory-scope"
OPENWEBUI_USER_HEADER = "x-openwebui-user-id"
_NAMING = frozenset({SCOPE_HEADER.encode(), OPENWEBUI_USER_HEADER.encode()})
"""The header names that name an end user, as the ASGI server gives them (lower case)."""


@dataclass(frozen=True, slots=True)
class EndUser:
    """One person behind a key, as the request names them."""

    id: str
    name: str = ""
    email: str = ""
    role: str = ""
    """What Open WebUI says of them (for display and logs, never for access)."""


_warned: set[str] = set()
"""Principals already warned about for forwarding Open WebUI users while untrusted."""


def end_user_of(
    connection: HTTPConnection, principal: Principal, named: str | None = None
) -> EndUser | None:
    """The end user ``connection`` is for, if its key may name one and it does; ``named``:
    what the request's body says (``safety_identifier``, else ``user``). A 400 for a name
    that is not 1 to 128 printable characters, a 403 for our header from an untrusted key."""
    # Most requests name nobody: one pass over the raw header names settles it (~0.3 µs, where
    # decoding the headers to look them up by name costs ~2 µs a turn).
    if not any(name in _NAMING for name, _ in connection.scope["headers"]):
        if named and principal.trusted_front_end:
            return EndUser(_checked(named.strip(), "user"))
        return None
    headers = connection.headers
    scope = headers.get(SCOPE_HEADER, "").strip()
    if scope:
        if not principal.trusted_front_end:
            raise APIError(
                403,
                f"This API key may not name end users ({SCOPE_HEADER}): mark it "
                "api_keys[].trusted_front_end: true.",
                param=SCOPE_HEADER,
                code="end_user_not_allowed",
            )
        return EndUser(_checked(scope, SCOPE_HEADER))
    forwarded = headers.get(OPENWEBUI_USER_HEADER, "").strip()
    if forwarded:
        if principal.trusted_front_end:
            return EndUser(
                _checked(forwarded, OPENWEBUI_USER_HEADER),
                name=headers.get("x-openwebui-user-name", "")[:256],
                email=headers.get("x-openwebui-user-email", "")[:256],
                role=headers.get("x-openwebui-user-role", "")[:64],
            )
        if principal.name not in _warned:
            _warned.add(principal.name)
            log.warning(
                "key %s forwards Open WebUI users but is not trusted_front_end: its users "
                "share one memory and one set of sessions (docs/end-users.md)",
                principal.name,
            )
        return None
    if named and principal.trusted_front_end:
        return EndUser(_checked(named.strip(), "user"))
    return None


def end_user_id(
    connection: HTTPConnection, principal: Principal, named: str | None = None
) -> str | None:
    """The id of the end user ``connection`` is for (see :func:`end_user_of`), if any."""
    end_user = end_user_of(connection, principal, named)
    return end_user.id if end_user is not None else None


def sees(end_user: str | None, made_for: str | None, *, shared: bool = False) -> bool:
    """Whether a request for ``end_user`` sees a record of its key made for ``made_for``
    (None: the key's own; docs/end-users.md): its own; with ``shared``, the key's own too
    (uploads, conversations: what an end user makes of those is theirs). Never another end
    user's, and a request naming none sees the key's own only."""
    return made_for == end_user or (shared and made_for is None)


def scoped_owner(principal: Principal, end_user: EndUser | str | None) -> str:
    """The owner of what belongs to ``end_user`` behind ``principal``'s key (memory,
    sessions, workspaces, agent-written skills): ``principal/end_user``, or the key's own
    name without one. Principal names hold no ``/``, so the two parts never blur."""
    if end_user is None:
        return principal.name
    user = end_user if isinstance(end_user, str) else end_user.id
    return f"{principal.name}/{user}"


def _checked(value: str, param: str) -> str:
    if not valid_name(value):
        raise APIError(
            400,
            f"The {param} that names the end user must be 1 to {MAX_NAME_LENGTH} printable "
            "characters.",
            param=param,
        )
    return value
