"""A message's file given to the model itself, for a profile whose agent has no file tools.

As OpenAI does: a document (PDF, DOCX, XLSX, PPTX) as its extracted text — extracted in the
sandbox (:mod:`hermes_core.tools.documents`), never in the server; where no sandbox can run,
a note that it could not be read here —, an image (told by its bytes: PNG, JPEG, GIF or
WebP) as an image part, a text file (CSV included) as its text; each cut to
:data:`MAX_TEXT_CHARS`. An id that is not one of the key's uploads is a 404 before anything
runs (:meth:`FileVault.get`).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hermes_core.providers.images import sniff_image_type
from hermes_core.tools.documents import DocumentUnreadable, document_kind, extract_text
from hermes_core.tools.file_scan import is_binary
from hermes_core.tools.sandbox import SandboxPolicy
from server.errors import APIError
from server.files.uploads import (
    MAX_INLINE_IMAGE_BYTES,
    FileVault,
    clean_filename,
    inline_bytes,
    unreadable_note,
)

MAX_TEXT_CHARS = 100_000
"""Characters of one file's text the model is given (then a line says what was left out)."""
_SNIFF = 8192


async def file_for_model(
    vault: FileVault | None,
    owner: str,
    part: dict[str, Any],
    *,
    policy: SandboxPolicy | None = None,
) -> dict[str, Any]:
    """The content part the model reads for a message's file ``part`` (``file_id``: one of
    ``owner``'s uploads, else a 404; or inline ``file_data``)."""
    file_id = part.get("file_id")
    if isinstance(file_id, str) and file_id:
        if vault is None:
            raise APIError(400, "This server keeps no files: send file_data instead.")
        record = await vault.get_readable(owner, file_id)
        source: Path | bytes = vault.path(record)
        name = part.get("filename") or record.filename
        reference = file_id
    else:
        source = inline_bytes(part)
        name = part.get("filename")
        reference = "inline data"
    name = clean_filename(name if isinstance(name, str) else None)
    with _opened(source) as descriptor:
        size = os.fstat(descriptor).st_size
        head = os.pread(descriptor, _SNIFF, 0)
        kind = document_kind(name, head)
        if kind is not None:
            try:
                text = await extract_text(
                    descriptor,
                    kind,
                    policy=policy or SandboxPolicy(),
                    reuse=not isinstance(source, bytes),
                )
            except DocumentUnreadable as exc:
                return _text_part(unreadable_note({**part, "filename": name}, str(exc)))
            return _text_part(_shown(name, reference, text))
        media_type = sniff_image_type(head)  # by its bytes: a pasted image is named "blob"
        if media_type is not None:
            return await _image_part(descriptor, name, size, media_type)
        if is_binary(head) and not name.lower().endswith((".csv", ".tsv")):
            return _text_part(
                f"[The user attached {name} ({reference}, {size} bytes): a binary file this "
                "agent cannot read.]"
            )
        data = await asyncio.to_thread(os.pread, descriptor, MAX_TEXT_CHARS * 4, 0)
    return _text_part(_shown(name, reference, data.decode("utf-8", "replace")))


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _shown(name: str, reference: str, text: str) -> str:
    cut = ""
    if len(text) > MAX_TEXT_CHARS:
        cut = f"\n[… {len(text) - MAX_TEXT_CHARS} more characters of {name} are not shown]"
        text = text[:MAX_TEXT_CHARS]
    return (
        f"[The user attached {name} ({reference}); its text follows.]\n"
        f"{text.rstrip()}{cut}\n[End of {name}.]"
    )


async def _image_part(descriptor: int, name: str, size: int, media_type: str) -> dict[str, Any]:
    if size > MAX_INLINE_IMAGE_BYTES:
        raise APIError(
            400, f"Image {name} is larger than {MAX_INLINE_IMAGE_BYTES} bytes.", param="messages"
        )
    data = await asyncio.to_thread(os.pread, descriptor, size, 0)
    url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url}}


@contextmanager
def _opened(source: Path | bytes) -> Iterator[int]:
    """A read-only descriptor of ``source`` (inline bytes: held in memory)."""
    if isinstance(source, bytes):
        descriptor = os.memfd_create("attached-file")
        try:
            os.write(descriptor, source)
        except BaseException:
            os.close(descriptor)
            raise
    else:
        descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        yield descriptor
    finally:
        os.close(descriptor)
