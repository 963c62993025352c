"""What every endpoint that starts runs needs: the profile a request names, the conversation it
names, and whose memory its agent uses."""

from __future__ import annotations

from fastapi import Request

from server.auth import Principal
from server.errors import APIError
from server.services import Profile, Services
from server.sessions.service import MAX_NAME_LENGTH, valid_name


def resolve_profile(services: Services, model: str, principal: Principal) -> Profile:
    """The profile ``model`` names, if ``principal`` may use it (else a 404 or 403)."""
    profile = services.profile(model)
    if profile is None:
        raise APIError(
            404, f"The model '{model}' does not exist.", param="model", code="model_not_found"
        )
    if not principal.may_use(profile.id):
        raise APIError(
            403,
            f"This API key may not use the model '{profile.id}'.",
            param="model",
            code="model_not_allowed",
        )
    return profile


def is_openwebui(request: Request) -> bool:
    return any(name.startswith("x-openwebui-") for name in request.headers)


def session_name_of(request: Request) -> str | None:
    """The conversation the client names: ours, else Open WebUI's chat id."""
    for header in ("x-hermes-session-id", "x-openwebui-chat-id"):
        value = request.headers.get(header, "").strip()
        if value:
            if not valid_name(value):
                raise APIError(
                    400,
                    f"The {header} header must be 1 to {MAX_NAME_LENGTH} printable characters.",
                    param=header,
                )
            return value
    return None


def memory_owner(request: Request, principal: Principal) -> str:
    """Memory belongs to the key's principal, or to a named scope inside it (one key serving
    several end users keeps their memories apart)."""
    scope = request.headers.get("x-hermes-memory-scope", "").strip()
    if not scope:
        return principal.name
    if not valid_name(scope):
        raise APIError(
            400,
            f"The x-hermes-memory-scope header must be 1 to {MAX_NAME_LENGTH} printable "
            "characters.",
            param="x-hermes-memory-scope",
        )
    return f"{principal.name}/{scope}"
