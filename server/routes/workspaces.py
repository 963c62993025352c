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


@router.get(
    "/{conversation:path}/files", response_model=WorkspaceFileList, responses=errors(401, 404)
)
async def list_workspace(
    conversation: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any] | StreamingResponse:
    """The workspace's files (recursively; symlinks left out), by path. A conversation's name
    may hold slashes (``team/alpha``, sent as ``team%2Falpha`` or as is)."""
    found = await _resolve(request, principal, conversation + "/files")
    if isinstance(found, StreamingResponse):  # a file named "files", e.g. demo/files/out/files
        return found
    files, more = await asyncio.to_thread(_walk, found)
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
    "/{conversation:path}/files/{path:path}",
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
    found = await _resolve(request, principal, f"{conversation}/files/{path}")
    if not isinstance(found, StreamingResponse):
        raise APIError(
            404, f"No file '{path}' in this workspace.", param="path", code="file_not_found"
        )
    return found


async def _resolve(request: Request, principal: Principal, rest: str) -> Path | StreamingResponse:
    """What ``rest`` (the URL past ``/v1/workspaces/``) names: ``<conversation>/files`` (the
    workspace's root) or ``<conversation>/files/<path>`` (that file's bytes). Conversation
    names and paths may both hold ``/files/``, so each way of reading ``rest`` is tried, the
    shortest conversation first, until one names an existing workspace (and file)."""
    no_workspace: APIError | None = None
    no_file: APIError | None = None
    for at in _separators(rest):
        conversation, path = rest[:at], rest[at + len("/files/") :]
        try:
            root = await _workspace(request, principal, conversation)
        except APIError as exc:
            no_workspace = no_workspace or exc
            continue
        if at + len("/files") == len(rest):
            return root
        try:
            descriptor, info = await open_file(root, path)
        except APIError as exc:
            no_file = no_file or exc
            continue
        return file_response(descriptor, info.st_size, Path(path).name)
    raise no_file or no_workspace or APIError(404, "No workspace here.", code="workspace_not_found")


def _separators(rest: str) -> list[int]:
    """Where ``/files`` may end the conversation's name in ``rest``: before a ``/`` or at its
    end (never at its start: a name is not empty)."""
    found, start = [], 1
    while (at := rest.find("/files", start)) != -1:
        end = at + len("/files")
        if end == len(rest) or rest[end] == "/":
            found.append(at)
        start = at + 1
    return found
