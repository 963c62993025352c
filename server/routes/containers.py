"""``/v1/containers``: each conversation's workspace as an OpenAI container, so the SDKs'
``client.containers`` calls reach the files an answer's ``container_file_citation`` names.

Ids are described in ``server/files/links.py``: a container id resolves only under the
caller's own key (and ``X-Hermes-Memory-Scope``), so another key's id is a 404. Containers
come into being with their conversation's first run; they cannot be created here, nor files
uploaded (attach files to a message instead).
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import StreamingResponse

from hermes_core.tools.file_scan import Budget, ScanStopped, regular_files
from hermes_core.tools.workspace import OutsideWorkspace, Workspace
from server.errors import APIError
from server.files.links import container_id, container_root, file_id, path_of
from server.files.removal import remove_workspace
from server.files.workspace_changes import NOT_SHOWN, read_container_record
from server.files.workspaces import conversation_workspace
from server.http.auth import Principal, require_principal
from server.http.openapi import BYTES, errors
from server.protocol.pages import list_page
from server.protocol.schemas.containers import (
    ContainerDeleted,
    ContainerFileDeleted,
    ContainerFileList,
    ContainerFileObject,
    ContainerList,
    ContainerObject,
)
from server.routes.file_bytes import file_response, open_file, shown
from server.services import Services
from server.serving.common import conversation_owner
from server.sessions.removal import turn_lock

router = APIRouter(prefix="/v1/containers", tags=["containers"])

MAX_LISTED = 10_000
"""Containers or files one listing considers at most (then sorted and paged)."""
Order = Literal["asc", "desc"]
Limit = Annotated[int, Query(ge=1, le=100)]


def _owner(request: Request, principal: Principal) -> tuple[Services, str]:
    services: Services = request.app.state.services
    return services, conversation_owner(request, principal)


async def _container(request: Request, principal: Principal, container: str) -> Path:
    services, owner = _owner(request, principal)
    root = None
    if services.workspaces_dir is not None:
        root = container_root(services.workspaces_dir, owner, container)
    if root is None or not await asyncio.to_thread(root.is_dir):
        raise APIError(
            404,
            f"No container found with id '{container}'.",
            param="container_id",
            code="container_not_found",
        )
    return root


def _describe(owner: str, root: Path) -> dict[str, Any]:
    record = read_container_record(root)
    modified = int(root.stat().st_mtime)
    created = record.get("created_at")
    name = record.get("name")
    return {
        "id": container_id(owner, root),
        "object": "container",
        "name": name if isinstance(name, str) else "",
        "created_at": created if isinstance(created, int) else modified,
        "last_active_at": modified,
        "status": "running",
    }


def _page(
    items: list[dict[str, Any]], *, after: str | None, limit: int, order: Order
) -> dict[str, Any]:
    """OpenAI's cursor page: by ``created_at`` (then id), from just after ``after``."""
    items.sort(key=lambda item: (item["created_at"], item["id"]), reverse=order == "desc")
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    return list_page(items[:limit], has_more=len(items) > limit)


@router.get("", response_model=ContainerList, responses=errors(400, 401))
async def list_containers(
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
    after: str | None = None,
    limit: Limit = 20,
    order: Order = "desc",
    name: str | None = None,
) -> dict[str, Any]:
    """This key's conversations that have a workspace."""
    services, owner = _owner(request, principal)
    if services.workspaces_dir is None:
        return _page([], after=after, limit=limit, order=order)
    owner_dir = conversation_workspace(services.workspaces_dir, owner, "").parent
    found = await asyncio.to_thread(_containers, owner, owner_dir)
    if name is not None:
        found = [item for item in found if item["name"] == name]
    return _page(found, after=after, limit=limit, order=order)


def _containers(owner: str, owner_dir: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    try:
        entries = list(os.scandir(owner_dir))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries[:MAX_LISTED]:
        if len(entry.name) == 32 and entry.is_dir(follow_symlinks=False):
            try:
                found.append(_describe(owner, Path(entry.path)))
            except (OSError, ValueError):
                continue  # removed meanwhile
    return found


@router.get("/{container_id}", response_model=ContainerObject, responses=errors(401, 404))
async def retrieve_container(
    container_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any]:
    root = await _container(request, principal, container_id)
    _, owner = _owner(request, principal)
    return await asyncio.to_thread(_describe, owner, root)


@router.delete("/{container_id}", response_model=ContainerDeleted, responses=errors(401, 404, 409))
async def delete_container(
    container_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any]:
    """The workspace and everything in it (the conversation's transcript stays); a 409 while
    a turn of its conversation runs, as for deleting the conversation itself: its commands
    would go on in a workspace gone from under them."""
    root = await _container(request, principal, container_id)
    services, owner = _owner(request, principal)
    name = (await asyncio.to_thread(read_container_record, root)).get("name")
    if services.store is None or not isinstance(name, str):
        await asyncio.to_thread(remove_workspace, root)  # read-only leftovers of commands too
    else:
        busy = APIError(
            409,
            "A turn of this container's conversation is running; retry once it has ended.",
            param="container_id",
            code="container_busy",
        )
        async with turn_lock(services.store, owner, name, busy=busy):
            await asyncio.to_thread(remove_workspace, root)
    return {"id": container_id, "object": "container.deleted", "deleted": True}


@router.get(
    "/{container_id}/files", response_model=ContainerFileList, responses=errors(400, 401, 404)
)
async def list_container_files(
    container_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
    after: str | None = None,
    limit: Limit = 20,
    order: Order = "desc",
) -> dict[str, Any]:
    """The workspace's regular files (symlinks, FIFOs and the usual caches left out)."""
    root = await _container(request, principal, container_id)
    found = await asyncio.to_thread(_files, container_id, root)
    return _page(found, after=after, limit=limit, order=order)


def _files(container: str, root: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    real = Workspace(root).ensure()
    try:
        for path, info in regular_files(real, Budget(), skip=NOT_SHOWN):
            if len(found) == MAX_LISTED:
                break
            found.append(_file(container, path.relative_to(real).as_posix(), info))
    except ScanStopped:
        pass  # a listing of what the walk reached in its time
    return found


def _file(container: str, path: str, info: os.stat_result) -> dict[str, Any]:
    return {
        "id": file_id(path),
        "object": "container.file",
        "container_id": container,
        "path": shown(path),  # its id keeps the exact bytes
        "bytes": info.st_size,
        "created_at": int(info.st_mtime),
        "source": "assistant",
    }


def _path(file: str) -> str:
    path = path_of(file)
    if path is None:
        raise APIError(
            404, f"No file found with id '{file}'.", param="file_id", code="file_not_found"
        )
    return path


@router.get(
    "/{container_id}/files/{file_id}",
    response_model=ContainerFileObject,
    responses=errors(401, 404),
)
async def retrieve_container_file(
    container_id: str,
    file_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any]:
    root = await _container(request, principal, container_id)
    path = _path(file_id)
    descriptor, info = await open_file(root, path, param="file_id")
    os.close(descriptor)
    return _file(container_id, path, info)


@router.get(
    "/{container_id}/files/{file_id}/content",
    response_class=StreamingResponse,
    responses={200: BYTES, **errors(401, 404)},
)
async def container_file_content(
    container_id: str,
    file_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> StreamingResponse:
    root = await _container(request, principal, container_id)
    path = _path(file_id)
    descriptor, info = await open_file(root, path, param="file_id")
    return file_response(descriptor, info.st_size, PurePosixPath(path).name)


@router.delete(
    "/{container_id}/files/{file_id}",
    response_model=ContainerFileDeleted,
    responses=errors(401, 404),
)
async def delete_container_file(
    container_id: str,
    file_id: str,
    request: Request,
    principal: Annotated[Principal, Depends(require_principal)],
) -> dict[str, Any]:
    root = await _container(request, principal, container_id)
    path = _path(file_id)
    if not await asyncio.to_thread(_unlink, root, path):
        raise APIError(
            404, f"No file found with id '{file_id}'.", param="file_id", code="file_not_found"
        )
    return {"id": file_id, "object": "container.file.deleted", "deleted": True}


def _unlink(root: Path, path: str) -> bool:
    """Remove the regular file ``path`` of the workspace (never a symlink's target)."""
    workspace, pure = Workspace(root), PurePosixPath(path)
    try:
        workspace.path(path)  # refuses absolute paths, '..' and links leading out
        parent = workspace.path(str(pure.parent)) if pure.parent.parts else workspace.ensure()
        target = parent / pure.name  # the name itself unresolved: a link goes, not its target
        if not stat.S_ISREG(os.lstat(target).st_mode):
            return False
        target.unlink()
    except (OutsideWorkspace, OSError):
        return False
    return True
