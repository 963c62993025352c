"""
title: hermes-server attachments
description: Puts the files attached to a message in the hermes-server agent's workspace.
version: 0.1.0
license: MIT
"""

# An Open WebUI filter function (Admin → Functions; see deploy/openwebui/README.md). It runs
# inside Open WebUI's process, before each chat request leaves for hermes-server:
#
# - each file attached to the message being sent is read from Open WebUI's storage (the
#   original bytes, not the text Open WebUI extracted from it), uploaded to hermes-server's
#   ``POST /v1/files`` with the key of the model's connection, and referred to by a ``file``
#   part in that message; hermes-server then copies it into the conversation's workspace;
# - ``file_handler = True`` tells Open WebUI to leave these files out of its own retrieval, so
#   the model is not also sent their extracted text;
# - a file that cannot be placed becomes a line in the message saying so (and a warning in the
#   chat), and the chat goes on;
# - once the answer is done (``outlet``), the uploads are deleted: the workspace keeps its copy,
#   and the connection's key, which all of Open WebUI's users share, does not fill its quota.
#   Regenerating an answer uploads the file again; the server sees the same bytes under the
#   same name and does not copy them twice.
# - uploads and deletes name the Open WebUI user (``X-OpenWebUI-User-Id``), as Open WebUI's
#   forwarded chat requests do: behind a key marked ``trusted_front_end`` the file is that
#   user's alone (docs/end-users.md); another key ignores the header.
#
# It uses only what Open WebUI itself has installed (aiohttp, pydantic) and never blocks the
# event loop: storage reads run in a thread, uploads stream through aiohttp.

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from pydantic import BaseModel, Field

log = logging.getLogger("hermes_attachments")

Emitter = Callable[[dict[str, Any]], Awaitable[None]]
Upload = tuple[str, str, str, str]
"""(base URL, key, file id, user id) of a file uploaded to hermes-server for one answer."""
_UNFINISHED = 1024
"""Answers whose uploads are remembered until their outlet deletes them (a stopped or failed
answer may never get one: past this many, the oldest are forgotten, and their uploads stay
on the server)."""


class PlacementFailed(Exception):
    """A file could not be handed to hermes-server; the message says why, for the user."""


class Filter:
    file_handler = True  # Open WebUI: these files are ours, keep them out of its retrieval

    class Valves(BaseModel):
        priority: int = Field(default=0, description="Order among filters (lower runs first).")
        base_url: str = Field(
            default="",
            description=(
                "hermes-server's /v1 address as Open WebUI reaches it; empty: the model's "
                "connection URL. The connection's API key is always the one used."
            ),
        )
        timeout_seconds: float = Field(
            default=300, gt=0, description="The longest one upload may take."
        )

    def __init__(self) -> None:
        self.valves = self.Valves()
        self._uploads: OrderedDict[tuple[str, ...], list[Upload]] = OrderedDict()

    async def inlet(
        self,
        body: dict[str, Any],
        __user__: dict[str, Any] | None = None,
        __model__: dict[str, Any] | None = None,
        __metadata__: dict[str, Any] | None = None,
        __request__: Any = None,
        __event_emitter__: Emitter | None = None,
    ) -> dict[str, Any]:
        attached = _attached_files(body, __metadata__ or {})
        message = _last_user_message(body)
        if not attached or message is None or __user__ is None:
            return body
        try:
            connection = await self._connection(__request__, __model__ or {}, body)
        except Exception as exc:  # never fail the chat over an attachment
            connection, unusable = ("", ""), f"no connection to hermes-server ({exc!r})"
        else:
            if connection is None:
                return body  # not a model of an OpenAI-compatible connection
            unusable = ""
        base_url, key = connection
        parts: list[dict[str, Any]] = []
        timeout = aiohttp.ClientTimeout(total=self.valves.timeout_seconds)
        user_id = str(__user__.get("id") or "")
        headers = _headers(key, user_id)
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as http:
            for item in attached:
                name = _name_of(item)
                try:
                    if unusable:
                        raise PlacementFailed(unusable)
                    path = await _stored_path(item, __user__)
                    file_id = await _upload(http, base_url, path, name)
                except Exception as exc:  # the chat goes on, and says so
                    why = str(exc) if isinstance(exc, PlacementFailed) else repr(exc)
                    parts.append(_failure_note(name, why))
                    await _warn(__event_emitter__, f"{name} is not in the agent's workspace: {why}")
                    continue
                parts.append({"type": "file", "file": {"file_id": file_id, "filename": name}})
                self._remember(__metadata__ or {}, (base_url, key, file_id, user_id))
        content = message.get("content")
        text = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        message["content"] = [*text, *parts]
        return body

    async def _connection(
        self, request: Any, model: dict[str, Any], body: dict[str, Any]
    ) -> tuple[str, str] | None:
        """(base URL, key) of the OpenAI-compatible connection serving the model."""
        from open_webui.routers.openai import get_openai_connection  # type: ignore[import-not-found, import-untyped, unused-ignore]

        index = model.get("urlIdx")
        if index is None and request is not None:
            base = (model.get("info") or {}).get("base_model_id") or body.get("model")
            known = getattr(request.app.state, "OPENAI_MODELS", None) or {}
            index = (known.get(base) or {}).get("urlIdx")
        if index is None:
            return None
        url, key, _config = await get_openai_connection(index)
        return (self.valves.base_url or url).rstrip("/"), key or ""

    async def outlet(
        self, body: dict[str, Any], __metadata__: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """After the answer: delete the files uploaded for it (their copies were placed when
        the request arrived, and stay in the workspace)."""
        uploads = self._uploads.pop(_answer_of(__metadata__ or {}), [])
        if not uploads:
            return body
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            for base_url, key, file_id, user_id in uploads:
                headers = _headers(key, user_id)
                try:
                    async with http.delete(f"{base_url}/files/{file_id}", headers=headers) as gone:
                        await gone.read()
                except Exception:  # it stays on the server; nothing the user need hear of
                    log.warning("could not delete %s from hermes-server", file_id, exc_info=True)
        return body

    def _remember(self, metadata: dict[str, Any], upload: Upload) -> None:
        self._uploads.setdefault(_answer_of(metadata), []).append(upload)
        while len(self._uploads) > _UNFINISHED:
            self._uploads.popitem(last=False)


def _headers(key: str, user_id: str) -> dict[str, str]:
    """The connection's key, and the user the file is for (whose it is on the server)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if user_id:
        headers["X-OpenWebUI-User-Id"] = user_id
    return headers


def _answer_of(metadata: dict[str, Any]) -> tuple[str, ...]:
    """Which answer a request is for (Open WebUI gives inlet and outlet the same metadata)."""
    return tuple(str(metadata.get(k) or "") for k in ("chat_id", "message_id", "task_id"))


def _attached_files(body: dict[str, Any], metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """The files attached to the message being sent (Open WebUI's own uploads only: not
    knowledge collections, notes or web pages, which have no single file to place)."""
    user_message = metadata.get("user_message") or {}
    items = user_message.get("files") if user_message else body.get("files")
    return [
        item
        for item in items or []
        if isinstance(item, dict) and item.get("type") in ("file", "image") and item.get("id")
    ]


def _last_user_message(body: dict[str, Any]) -> dict[str, Any] | None:
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return None


def _name_of(item: dict[str, Any]) -> str:
    file = item.get("file") or {}
    meta = file.get("meta") or {}
    return str(item.get("name") or meta.get("name") or file.get("filename") or "upload")


async def _stored_path(item: dict[str, Any], user: dict[str, Any]) -> str:
    """A local path holding the attached file's bytes, as Open WebUI stored them."""
    from open_webui.models.files import Files  # type: ignore[import-not-found, import-untyped, unused-ignore]
    from open_webui.storage.provider import Storage  # type: ignore[import-not-found, import-untyped, unused-ignore]

    record = await Files.get_file_by_id(str(item["id"]))
    if record is None or record.path is None:
        raise PlacementFailed("Open WebUI no longer has the file")
    if record.user_id != user.get("id"):
        raise PlacementFailed("the file belongs to another user")
    try:  # a download, for S3, GCS or Azure storage
        path: str = await asyncio.to_thread(Storage.get_file, record.path)
    except Exception as exc:
        raise PlacementFailed(f"Open WebUI could not read it ({exc})") from exc
    return path


async def _upload(http: aiohttp.ClientSession, base_url: str, path: str, name: str) -> str:
    """Upload the file at ``path`` to hermes-server as ``name``; its file id there."""
    try:
        source = await asyncio.to_thread(open, path, "rb")  # closed below
    except OSError as exc:
        raise PlacementFailed(f"Open WebUI could not read it ({exc})") from exc
    try:
        with source:
            form = aiohttp.FormData()
            form.add_field("purpose", "user_data")
            form.add_field("file", source, filename=name)
            async with http.post(f"{base_url}/files", data=form) as response:
                answer = await response.json(content_type=None)
    except OSError as exc:
        raise PlacementFailed(f"hermes-server could not be reached ({exc})") from exc
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        raise PlacementFailed(f"the upload to hermes-server failed ({exc!r})") from exc
    if response.status != 200 or not isinstance(answer, dict) or "id" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        why = error.get("message") if isinstance(error, dict) else None
        raise PlacementFailed(why or f"hermes-server answered {response.status}")
    return str(answer["id"])


def _failure_note(name: str, why: str) -> dict[str, Any]:
    return {
        "type": "text",
        "text": f"[The user attached {name}, but it could not be put in your workspace: {why}.]",
    }


async def _warn(emitter: Emitter | None, text: str) -> None:
    log.warning("%s", text)
    if emitter is not None:
        try:
            await emitter({"type": "notification", "data": {"type": "warning", "content": text}})
        except Exception:  # a toast that cannot be shown is no reason to fail the chat
            log.exception("could not show the warning")
