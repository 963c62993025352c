"""The shapes of ``/v1/files`` (as OpenAI's Files API) and of a workspace's files."""

from __future__ import annotations

from typing import Literal

from server.protocol.schemas.common import Shape


class FileObject(Shape):
    """An uploaded file (``file``)."""

    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["processed"]
    """Always ``processed``: a file is usable as soon as its upload is answered."""
    expires_at: int | None
    status_details: str | None


class FileList(Shape):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(Shape):
    id: str
    object: Literal["file"]
    deleted: bool


class WorkspaceFile(Shape):
    """A file in a conversation's workspace (``hermes.workspace_file``)."""

    object: Literal["hermes.workspace_file"]
    path: str
    """Relative to the workspace, with ``/``; download it from ``…/files/{path}``."""
    bytes: int
    modified_at: int


class WorkspaceFileList(Shape):
    object: Literal["list"]
    data: list[WorkspaceFile]
    has_more: bool
    """True when the workspace holds more files than one listing shows."""
