"""One workspace file's bytes as a response: opened confined to its workspace (no symlink
out, no FIFO waited on), streamed in chunks from the open descriptor."""

from __future__ import annotations

import asyncio
import mimetypes
import os
import stat
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from urllib.parse import quote

from fastapi.responses import StreamingResponse

from hermes_core.tools.workspace import OutsideWorkspace, Workspace
from server.errors import APIError

_CHUNK = 256 * 1024


def shown(path: str) -> str:
    """``path`` as text any client can read: a name whose bytes are not UTF-8 (a command may
    make one; Python keeps its bytes as lone surrogates) with each such byte shown as U+FFFD.
    Left as it is, it could not be encoded, and its listing would be a 500."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


async def open_file(root: Path, path: str, *, param: str = "path") -> tuple[int, os.stat_result]:
    """A read descriptor for ``path`` in the workspace ``root`` (which exists) and its stat;
    a 404 for anything that is not a regular file there."""
    try:
        descriptor = await asyncio.to_thread(Workspace(root).open, path, os.O_RDONLY)
    except (OutsideWorkspace, OSError):
        descriptor = -1
    info = os.fstat(descriptor) if descriptor >= 0 else None
    if info is None or not stat.S_ISREG(info.st_mode):
        if descriptor >= 0:
            os.close(descriptor)
        raise APIError(
            404, f"No file '{path}' in this workspace.", param=param, code="file_not_found"
        )
    return descriptor, info


def file_response(
    descriptor: int,
    size: int,
    name: str,
    *,
    inline: bool = False,
    headers: Mapping[str, str] | None = None,
) -> StreamingResponse:
    """The descriptor's first ``size`` bytes (closed once sent)."""
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    disposition = "inline" if inline else "attachment"
    return StreamingResponse(
        _read(descriptor, size),
        media_type=media_type,
        headers={
            "content-length": str(size),
            "content-disposition": f"{disposition}; filename*=utf-8''{quote(shown(name))}",
            **(headers or {}),
        },
    )


async def _read(descriptor: int, size: int) -> AsyncIterator[bytes]:
    """What content-length promised, should the file grow meanwhile."""
    try:
        left = size
        while left > 0:
            chunk = await asyncio.to_thread(os.read, descriptor, min(_CHUNK, left))
            if not chunk:
                break
            left -= len(chunk)
            yield chunk
    finally:
        os.close(descriptor)
