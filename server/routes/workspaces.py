"""``/v1/workspaces/{conversation}/files``: what a conversation's agent left in its workspace,
listed and downloaded. ``{conversation}`` is what the run's answer names in its
``x-hermes-session-id`` header: the session's name (chat, Open WebUI), or a Responses chain's
session id. Paths are confined to the workspace as the file tools' are."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from hermes_core.tools.file_scan import Budget, ScanStopped, regular_files
from hermes_core.tools.workspace import Workspace
from server.errors import APIError
from server.http.auth import Principal, require_principal
from server.http.openapi import BYTES, errors
from server.protocol.schemas.files import WorkspaceFileList
from server.routes.file_bytes import file_response, open_file, shown
from server.services import Services
from server.serving.common import conversation_owner

router = APIRouter(prefix="/v1/workspaces", tags=["workspaces"])

MAX_LISTED = 10_000


async def _workspace(request: Request, principal: Principal, conversation: str) -> Path:
    services: Services = request.app.state.services
    owner = conversation_owner(request, principal)
    root = services.workspace(owner, conversation)
    if root is None or not await asyncio.to_thread(root.is_dir):
        raise APIError(
            404,
            f"No workspace for conversation '{conversation}'.",
            param="conversation",
            code="workspace_not_found",
        )
    return root


@router.get("/{conversation}/files", response_model=WorkspaceFileList, responses=errors(401, 404))
async def list_workspace(
    conversation: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any]:
    """The workspace's files (recursively; symlinks left out), by path."""
    root = await _workspace(request, principal, conversation)
    files, more = await asyncio.to_thread(_walk, root)
    return {"object": "list", "data": files, "has_more": more}


def _walk(root: Path) -> tuple[list[dict[str, Any]], bool]:
    """Up to MAX_LISTED regular files, and whether there are more (or the walk ran out of
    time). Only directories are opened, nothing is followed: a FIFO or link is not listed."""
    found: list[dict[str, Any]] = []
    root = Workspace(root).ensure()  # its real path: the walk follows no link, not even root
    try:
        for path, info in regular_files(root, Budget(), skip=frozenset()):
            if len(found) == MAX_LISTED:
                return found, True
            found.append(
                {
                    "object": "hermes.workspace_file",
                    "path": shown(path.relative_to(root).as_posix()),
                    "bytes": info.st_size,
                    "modified_at": int(info.st_mtime),
                }
            )
    except ScanStopped:
        return found, True
    return found, False


@router.get(
    "/{conversation}/files/{path:path}",
    response_class=StreamingResponse,
    responses={200: BYTES, **errors(401, 404)},
)
async def download_workspace_file(
    conversation: str,
    path: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> StreamingResponse:
    """One file of the workspace (never through a symlink that leads out of it; a FIFO,
    socket or directory is a 404 without being waited on)."""
    root = await _workspace(request, principal, conversation)
    descriptor, info = await open_file(root, path)
    return file_response(descriptor, info.st_size, Path(path).name)
