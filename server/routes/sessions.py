"""``DELETE /v1/sessions/{name}``: forget a named conversation, on disk too.

``{name}`` is what the client names the conversation by (``X-Hermes-Session-Id``, Open
WebUI's chat id, or the session id a Responses chain is named by). Deleting it deletes every
session of that name of the caller (all its branches, compressed parents included), their
transcripts and task lists, the conversation's approvals, its turn lock, and its workspace
directory with every file its agent left there. With an end user named (a trusted key's
``X-Hermes-Memory-Scope`` or Open WebUI's user header) it is that end user's conversation.

A conversation whose run is in progress is a 409 (stop the run, or retry once it has ended):
the deletion takes the conversation's turn lock, so no turn can begin while it goes.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request

from hermes_core.persistence import Store
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.openapi import errors
from server.protocol.schemas.common import Shape
from server.services import Services
from server.serving.common import conversation_owner
from server.sessions.removal import remove_conversation, turn_lock
from server.sessions.service import MAX_NAME_LENGTH, valid_name

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
log = logging.getLogger("hermes.retention")


class SessionDeleted(Shape):
    id: str
    """The conversation's name."""
    object: Literal["hermes.session.deleted"]
    deleted: bool
    sessions: int
    """Sessions (branches) deleted."""
    messages: int
    """Messages of their transcripts deleted."""
    workspace: bool
    """Whether it had a workspace directory (now removed)."""


def _store(services: Services) -> Store:
    if services.store is None:
        raise APIError(404, "This server keeps no sessions (it runs without a database).")
    return services.store


@router.delete("/{name:path}", response_model=SessionDeleted, responses=errors(400, 401, 404, 409))
async def delete_session(
    name: str, request: Request, principal: Annotated[Principal, Depends(require_principal)]
) -> dict[str, Any]:
    """Delete the conversation ``name`` (every session of it), its workspace and files."""
    if not valid_name(name):
        raise APIError(
            400,
            f"A session name is 1 to {MAX_NAME_LENGTH} printable characters.",
            param="name",
        )
    services: Services = request.app.state.services
    store = _store(services)
    owner = conversation_owner(request, principal)
    busy = APIError(
        409,
        "A run of this session is in progress; stop it, or retry once it has ended.",
        param="name",
        code="session_busy",
    )
    async with turn_lock(store, owner, name, busy=busy):
        if not await store.retention.has_conversation(owner, name):
            raise APIError(
                404, f"No session named '{name[:80]}'.", param="name", code="session_not_found"
            )
        counts, removed = await remove_conversation(
            store, owner, name, services.workspace(owner, name)
        )
    log.info(
        "session deleted on request: %d session(s), %d message(s), workspace %s",
        counts["sessions"],
        counts["messages"],
        "removed" if removed else "none",
    )
    return {
        "id": name,
        "object": "hermes.session.deleted",
        "deleted": True,
        "sessions": counts["sessions"],
        "messages": counts["messages"],
        "workspace": removed,
    }
