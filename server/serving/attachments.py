"""Files a request's messages carry or refer to, made into something the agent can read.

Uploaded images a Responses ``input_image`` names by ``file_id`` are inlined as ``data:`` URLs
(every upstream takes those), for any profile.

Chat ``file`` content parts (and Responses ``input_file`` parts, which the Responses input
reader turns into the same shape) are copied into the run's workspace, each part replaced by
a line telling the model where the file is (see :mod:`server.files`). A profile without a
workspace has no tool to read a file with, so the model is given the file itself: a
document's text, an image, a text file's text (see :mod:`server.file_reading`). Either way,
a ``file_id`` that is not one of the key's uploads is a 404 before the run starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hermes_core.agent import AgentRequest
from hermes_core.messages import Message
from server.auth import Principal
from server.errors import APIError
from server.file_reading import file_for_model
from server.files import image_data_url, into_workspace
from server.services import Services

_FILE_PARTS = ("file", "image_file")


def _has_files(content: object) -> bool:
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") in _FILE_PARTS for part in content
    )


async def with_files(
    services: Services, request: AgentRequest, *, principal: Principal
) -> AgentRequest:
    """``request`` with every file part replaced by what the model should read of it (files
    placed in ``request.workspace`` when it has one). Nothing to do, and nothing read, for a
    request without file parts."""
    history_has = any(_has_files(m.get("content")) for m in request.history)
    if not history_has and not _has_files(request.user_message):
        return request
    vault, workspace = services.files, request.workspace

    async def read(content: Any) -> Any:
        if not _has_files(content):
            return content
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_file":
                url = await image_data_url(vault, principal.name, str(part.get("file_id")))
                parts.append({"type": "image_url", "image_url": {"url": url}})
            elif isinstance(part, dict) and part.get("type") == "file":
                file = part.get("file")
                if not isinstance(file, dict):
                    raise APIError(400, "A file part needs a 'file' object.", param="messages")
                if workspace is None:
                    parts.append(await file_for_model(vault, principal.name, file))
                else:
                    text = await into_workspace(vault, principal.name, file, workspace)
                    parts.append({"type": "text", "text": text})
            else:
                parts.append(part)
        return parts

    history: list[Message] = []
    for message in request.history:
        if _has_files(message.get("content")):
            message = {**message, "content": await read(message.get("content"))}
        history.append(message)
    return dataclasses.replace(
        request, history=history, user_message=await read(request.user_message)
    )
