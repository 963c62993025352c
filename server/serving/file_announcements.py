"""Wiring a run to the announcement of the files it makes: the workspace watched around the
run, and the announcer its views use (container id, signed links)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from starlette.requests import HTTPConnection

from hermes_core.agent import AgentRequest
from server.files.call_images import CallImagesWatch
from server.files.links import LinkTarget, container_id, signed_url
from server.files.workspace_changes import WorkspaceWatch
from server.runs.manager import Runnable
from server.services import Services
from server.views.file_citations import FileAnnouncer


def watched(
    agent: Runnable,
    request: AgentRequest,
    conversation: tuple[str, str] | None,
    *,
    call_images: bool = False,
) -> Runnable:
    """``agent``, watching its conversation's workspace when the run has one that outlives
    it, for the files the run made (a run of no conversation works in a temporary one: nothing
    there to announce); when ``call_images`` (a Responses view shows them), for the images
    each ``code`` call made too, inlined when the workspace is temporary."""
    workspace = request.workspace
    if workspace is None:
        return agent
    if call_images:
        return CallImagesWatch(agent, workspace, conversation[1] if conversation else None)
    return agent if conversation is None else WorkspaceWatch(agent, workspace, conversation[1])


async def file_announcer(
    services: Services,
    connection: HTTPConnection,
    request: AgentRequest,
    conversation: tuple[str, str] | None,
    *,
    openwebui: bool,
) -> FileAnnouncer | None:
    """How the answers of ``request``'s run name its files (None: it has no lasting
    workspace)."""
    workspace = request.workspace
    if conversation is None or workspace is None:
        return None
    links = services.file_links
    signer = links.signer() if links.signer_ready else await asyncio.to_thread(links.signer)
    announced = container_id(conversation[0], workspace)
    base = links.base_url(str(connection.base_url))
    if signer is None:
        return FileAnnouncer(announced, None, openwebui, base)
    seconds = links.settings.link_seconds
    where = _workspace_key(workspace)

    def link(path: str) -> str:
        token = signer.sign(LinkTarget(where, path), int(time.time()) + seconds)
        return signed_url(base, token, path)

    return FileAnnouncer(announced, link, openwebui, base)


def _workspace_key(workspace: Path) -> str:
    """``<owner digest>/<conversation digest>``: the workspace, relative to their root."""
    return f"{workspace.parent.name}/{workspace.name}"
