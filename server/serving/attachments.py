"""Files a request's messages carry or refer to, made into something the agent can read.

Uploaded images a Responses ``input_image`` names by ``file_id`` are inlined as ``data:`` URLs
(every upstream takes those), for any profile.

Chat ``file`` content parts (and Responses ``input_file`` parts, which the Responses input
reader turns into the same shape) are copied into the run's workspace, each part replaced by
a line telling the model where the file is (see :mod:`server.files.uploads`). A profile without a
workspace has no tool to read a file with, so the model is given the file itself: a
document's text, an image, a text file's text (see :mod:`server.files.reading`). Either way,
a ``file_id`` that is not one of the key's uploads (or is another end user's: docs/end-users.md)
is a 404 before the run starts.

Open WebUI sends no file parts of its own: it gives the model the text it extracted from an
attached file, in ``<source … name="sales.csv">`` blocks of its RAG template. That text is not
the file (a CSV's rows as ``column: value`` lines, often only the passages it retrieved), so it
is never written into the workspace as if it were; the model is told instead that the file is
not there, and how it could be (the filter ``deploy/openwebui/hermes_attachments.py``).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from hermes_core.agent import AgentRequest
from hermes_core.messages import Message, text_of
from server.errors import APIError
from server.files.reading import file_for_model
from server.files.uploads import FileVault, deleted_note, image_data_url, into_workspace
from server.http.auth import Principal
from server.services import Services

_FILE_PARTS = ("file", "image_file")


def _has_files(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in _FILE_PARTS for part in content
    )


async def with_files(
    services: Services,
    request: AgentRequest,
    *,
    principal: Principal,
    end_user: str | None = None,
) -> AgentRequest:
    """``request`` with every file part replaced by what the model should read of it (files
    placed in ``request.workspace`` when it has one). Nothing to do, and nothing read, for a
    request without file parts. ``end_user``: who behind the key the request is for; they may
    name their own uploads and the key's, never another end user's (a 404)."""
    request = _with_note_on_extracted_files(request)
    history_has = any(_has_files(m.get("content")) for m in request.history)
    if not history_has and not _has_files(request.user_message):
        return request
    vault = services.files.as_end_user(end_user) if services.files is not None else None
    workspace = request.workspace

    async def read(content: Any, *, earlier: bool) -> Any:
        if not _has_files(content):
            return content
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_file":
                parts.append(await _image_for_run(vault, principal, part, earlier))
            elif isinstance(part, dict) and part.get("type") == "file":
                file = part.get("file")
                if not isinstance(file, dict):
                    raise APIError(400, "A file part needs a 'file' object.", param="messages")
                parts.append(await _file_for_run(vault, principal, file, workspace, earlier))
            else:
                parts.append(part)
        return parts

    # The request's newest message: its own user message, or (chat) the history's last. A file
    # of an earlier one was placed when that message was new; its upload may be gone since.
    newest = len(request.history) - 1 if request.user_message is None else None
    history: list[Message] = []
    for index, message in enumerate(request.history):
        if _has_files(message.get("content")):
            content = await read(message.get("content"), earlier=index != newest)
            message = {**message, "content": content}
        history.append(message)
    return dataclasses.replace(
        request, history=history, user_message=await read(request.user_message, earlier=False)
    )


async def _file_for_run(
    vault: FileVault | None,
    principal: Principal,
    file: dict[str, Any],
    workspace: Path | None,
    earlier: bool,
) -> dict[str, Any]:
    """What the model reads of a message's ``file``: a line saying where it was placed in the
    workspace, or without one the file itself. A file of an ``earlier`` message whose upload
    was deleted since is a note, not an error: the conversation goes on."""
    if workspace is not None:
        text = await into_workspace(vault, principal.name, file, workspace, earlier=earlier)
        return {"type": "text", "text": text}
    try:
        return await file_for_model(vault, principal.name, file)
    except APIError as exc:
        if not earlier or exc.status != 404:
            raise
        return {"type": "text", "text": deleted_note(file)}


async def _image_for_run(
    vault: FileVault | None, principal: Principal, part: dict[str, Any], earlier: bool
) -> dict[str, Any]:
    """An uploaded image as the model sees it, inlined. An ``earlier`` message's image whose
    upload was deleted since is a note, as a file's is: else every later turn of the
    conversation (its items, a Responses chain) was a 404."""
    file_id = str(part.get("file_id"))
    try:
        url = await image_data_url(vault, principal.name, file_id)
    except APIError as exc:
        if not earlier or exc.status != 404:
            raise
        return {"type": "text", "text": deleted_note({"file_id": file_id, "filename": "image"})}
    return {"type": "image_url", "image_url": {"url": url}}


# A source block of Open WebUI's RAG template: ``<source id="1" name="sales.csv" …>``.
_SOURCE_NAME = re.compile(r'<source id="\d+" name="([^"]+)"')


def _with_note_on_extracted_files(request: AgentRequest) -> AgentRequest:
    """``request`` with a note after the user's new message when it (or the system message,
    where Open WebUI may put it) carries Open WebUI's extracts of files that are not in the
    run's workspace: the model would otherwise look for them there, or take the extract for
    the whole file."""
    workspace, history = request.workspace, list(request.history)
    asked: Any = request.user_message
    if asked is None and history and history[-1]["role"] == "user":
        asked = history[-1].get("content")
    if workspace is None or not asked:
        return request
    names = _extracted_files(text_of(asked), request.system_message or "")
    missing = [name for name in names if not _is_placed(workspace, name)]
    if not missing:
        return request
    note = (
        f"[Open WebUI gave the text it extracted from {', '.join(missing)} (the <source> blocks "
        "above), not the file: it is not in your workspace, so commands cannot open it. That "
        "text may be partial (the passages Open WebUI retrieved) and is not the file's own "
        "format. For the file itself, Open WebUI needs the hermes-server attachments filter "
        "(deploy/openwebui/README.md); say so if the task needs the file.]"
    )
    parts = [{"type": "text", "text": asked}] if isinstance(asked, str) else list(asked)
    noted = [*parts, {"type": "text", "text": note}]
    if request.user_message is not None:
        return dataclasses.replace(request, user_message=noted)
    history[-1] = {**history[-1], "content": noted}
    return dataclasses.replace(request, history=history)


def _extracted_files(*texts: str) -> list[str]:
    """The names of the files whose extracts ``texts`` carry (web pages left out)."""
    names: dict[str, None] = {}
    for text in texts:
        if "<source" in text:
            for name in _SOURCE_NAME.findall(text):
                if "://" not in name:
                    names[name] = None
    return list(names)


def _is_placed(workspace: Path, name: str) -> bool:
    return "/" not in name and (workspace / name).is_file()
