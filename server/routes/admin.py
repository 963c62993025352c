"""``/v1/admin/…``: what only an admin key may do (``api_keys[].admin: true``; no key is one
unless it says so). Any other key gets a 403 ``admin_key_required``.

- ``POST /v1/admin/retention/sweep`` runs one retention sweep now (the sweeper otherwise
  runs every 10 minutes on one replica at a time) and answers what it deleted.
- ``DELETE /v1/admin/end_users/{end_user}?key=<principal>`` erases an end user behind a key:
  their runs stopped on any replica, every row and file of theirs deleted
  (docs/retention.md).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hermes_core.events import InterruptSource
from hermes_core.persistence import Store
from server.errors import APIError
from server.http.auth import Principal, require_admin
from server.http.openapi import errors
from server.protocol.schemas.admin import EndUserErased, RetentionSwept
from server.retention.erasure import EndUserBusy, erase_end_user
from server.services import Services
from server.sessions.service import MAX_NAME_LENGTH, valid_name
from server.skills.library import StoredSkills

router = APIRouter(prefix="/v1/admin", tags=["admin"])

Admin = Annotated[Principal, Depends(require_admin)]
SWEEP_WAIT_SECONDS = 30.0
"""How long a requested sweep waits for another replica's sweep to finish."""


def _store(services: Services) -> Store:
    if services.store is None:
        raise APIError(404, "This server keeps nothing (it runs without a database).")
    return services.store


@router.post(
    "/retention/sweep", response_model=RetentionSwept, responses=errors(401, 403, 404, 409)
)
async def sweep_now(request: Request, _admin: Admin) -> dict[str, Any]:
    """Delete what is past retention now, as the sweeper does every 10 minutes."""
    services: Services = request.app.state.services
    _store(services)
    sweeper = services.sweeper
    if sweeper is None:
        raise APIError(404, "This server runs no retention sweeper.")
    deleted = await sweeper.sweep(wait_seconds=SWEEP_WAIT_SECONDS)
    if deleted is None:
        raise APIError(
            409,
            "Another replica is sweeping; retry once it has finished.",
            code="sweep_in_progress",
        )
    return {"object": "hermes.retention.sweep", "deleted": deleted}


@router.delete(
    "/end_users/{end_user:path}",
    response_model=EndUserErased,
    responses=errors(400, 401, 403, 404, 409),
)
async def erase(
    end_user: str,
    request: Request,
    _admin: Admin,
    key: Annotated[
        str | None, Query(description="The principal of the key the end user is behind.")
    ] = None,
) -> dict[str, Any]:
    """Erase ``end_user`` behind the key ``key``: stop their runs, delete every row and file
    of theirs. A 404 when nothing of theirs was found."""
    if not key:
        raise APIError(400, "Name the key the end user is behind: ?key=<principal>.", param="key")
    if not valid_name(key) or "/" in key:
        raise APIError(400, "'key' is not a key's principal.", param="key")
    if not valid_name(end_user):
        raise APIError(
            400,
            f"An end user is 1 to {MAX_NAME_LENGTH} printable characters.",
            param="end_user",
        )
    services: Services = request.app.state.services
    store = _store(services)

    async def stop(run_id: str) -> object:
        return await services.stop_anywhere(run_id, key, InterruptSource.STOP_API)

    try:
        deleted = await erase_end_user(
            store,
            key,
            end_user,
            stop=stop,
            workspaces_dir=services.workspaces_dir,
            file_path=services.files.path if services.files is not None else None,
            sweeper=services.sweeper,
            forget=services.forget_runs,
        )
    except EndUserBusy as busy:
        raise APIError(
            409,
            f"{busy.runs} run(s) of this end user are still stopping; retry in a moment.",
            code="end_user_busy",
        ) from None
    if isinstance(services.skills, StoredSkills):
        services.skills.forget(f"{key}/{end_user}")
    if not any(deleted.values()):
        raise APIError(
            404,
            f"Nothing of end user '{end_user[:80]}' behind key '{key[:80]}' was found.",
            param="end_user",
            code="end_user_not_found",
        )
    return {
        "object": "hermes.end_user.erased",
        "key": key,
        "end_user": end_user,
        "deleted": deleted,
    }
