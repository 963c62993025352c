"""The shapes of ``/v1/containers``: a conversation's workspace as OpenAI's Containers API
shows a code interpreter's container, and its files."""

from __future__ import annotations

from typing import Literal

from server.protocol.schemas.common import Shape


class ContainerObject(Shape):
    """A conversation's workspace (``container``)."""

    id: str
    """``cntr_…``: stable for the conversation, and only this API key's (see README)."""
    object: Literal["container"]
    name: str
    """The conversation's name (its ``x-hermes-session-id``), when the server knows it."""
    created_at: int
    last_active_at: int
    """When a file in it last changed (the directory's modification time)."""
    status: Literal["running"]
    """Always ``running``: a workspace is there until it is deleted."""


class ContainerList(Shape):
    object: Literal["list"]
    data: list[ContainerObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ContainerDeleted(Shape):
    id: str
    object: Literal["container.deleted"]
    deleted: bool


class ContainerFileObject(Shape):
    """A regular file of the workspace (``container.file``)."""

    id: str
    """``cfile_…``: the file's relative path, encoded (see README)."""
    object: Literal["container.file"]
    container_id: str
    path: str
    """Relative to the workspace, with ``/``."""
    bytes: int
    created_at: int
    """The file's modification time (a workspace keeps no creation times)."""
    source: Literal["assistant"]


class ContainerFileList(Shape):
    object: Literal["list"]
    data: list[ContainerFileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class ContainerFileDeleted(Shape):
    id: str
    object: Literal["container.file.deleted"]
    deleted: bool
