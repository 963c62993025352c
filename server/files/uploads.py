"""Files clients upload (``/v1/files``), and how a message's file gets into a workspace.

The bytes of a file live on disk under ``files_dir/<owner digest>/<file id>``; the store keeps
whose it is, its name and size. A key is held to a quota (bytes in all, and a file count), so
one client cannot fill the disk others share.

A message may refer to a file (chat: a ``file`` content part; Responses: ``input_file``) by id,
or carry it inline (``file_data``, base64). For a profile with a workspace, the file is copied
into the conversation's workspace and the part becomes a line telling the model where it is;
a file already copied there (the same upload, or the same inline bytes, in a later turn's
resent history; or the same bytes under the same name, uploaded again) is not copied again,
so what the agent made of it is not overwritten.
Without a workspace, the model is given the file itself (``server/files/reading.py``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import time
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from email.errors import HeaderParseError
from email.header import decode_header, make_header
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from hermes_core.persistence import FileRecord, Store
from hermes_core.providers.images import sniff_image_type
from hermes_core.tools.quota import QuotaExceeded, admit_write
from hermes_core.tools.workspace import OutsideWorkspace, Workspace
from server.errors import APIError

PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
"""The ``purpose`` values the OpenAI API documents; all are kept alike here."""
MAX_FILENAME_CHARS = 255
_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class FileLimits:
    max_file_bytes: int
    quota_bytes: int
    """Bytes of all of one key's files."""
    max_files: int
    """Files one key may keep."""


_ENCODED_WORDS = re.compile(r"(?:=\?[^?\s]+\?[BbQq]\?[^?\s]*\?=\s*)+")


def decoded_filename(name: str | None) -> str:
    """A multipart upload's file name as its sender meant it. .NET's HttpClient (and so its
    OpenAI SDK) sends a name that is not ASCII as MIME encoded words (``=?utf-8?B?…?=``),
    with the plain name only in ``filename*``, which the multipart parser ignores; such a
    name is decoded, anything else (or one that does not decode) is kept as it came."""
    if not name or not _ENCODED_WORDS.fullmatch(name):
        return name or ""
    try:
        return str(make_header(decode_header(name)))
    # An unknown charset; base64 of no whole byte (HeaderParseError, which is no ValueError).
    except (LookupError, ValueError, UnicodeDecodeError, HeaderParseError):
        return name


def clean_filename(name: str | None) -> str:
    """A name safe to show and to use in a workspace: its last path part, without control
    characters, at most 255 characters; ``upload`` when nothing is left."""
    base = PurePosixPath((name or "").replace("\\", "/")).name
    base = "".join(c for c in base if unicodedata.category(c)[0] != "C").strip()
    if base in ("", ".", ".."):
        return "upload"
    return base[:MAX_FILENAME_CHARS]


class FileVault:
    """Uploaded files: kept on disk under ``root``, recorded in ``store``."""

    def __init__(
        self,
        root: Path,
        store: Store,
        limits: FileLimits,
        *,
        end_user: str | None = None,
        locks: dict[str, asyncio.Lock] | None = None,
    ) -> None:
        self.root = root
        self.store = store
        self.limits = limits
        self.end_user = end_user
        """Whose view this is (docs/end-users.md): an end user's uploads are theirs, and they
        see their own and the key's own files, never another end user's; without one, the
        key's own files only."""
        self._owner_locks: dict[str, asyncio.Lock] = locks if locks is not None else {}

    def as_end_user(self, end_user: str | None) -> FileVault:
        """The same files as ``end_user`` sees them (the quota stays the key's)."""
        if end_user == self.end_user:
            return self
        return FileVault(
            self.root, self.store, self.limits, end_user=end_user, locks=self._owner_locks
        )

    def path(self, record: FileRecord) -> Path:
        return self.root / _digest(record.owner) / record.id

    async def save(
        self,
        owner: str,
        source: BinaryIO,
        *,
        size: int | None,
        filename: str,
        purpose: str,
        expires_after: int | None = None,
    ) -> FileRecord:
        """Keep ``source``'s bytes as a new file of ``owner`` (expiring ``expires_after``
        seconds after it is made, if given); 400 for a bad purpose, 413 beyond the size limit
        or the owner's quota."""
        if purpose not in PURPOSES:
            raise APIError(
                400,
                f"'purpose' must be one of {', '.join(sorted(PURPOSES))}.",
                param="purpose",
            )
        if size is not None and size > self.limits.max_file_bytes:
            raise self._too_large()
        lock = self._owner_locks.setdefault(owner, asyncio.Lock())
        async with lock:  # uploads of one key in this process, one after another
            # A first look, so a key already at its quota sends no bytes to disk; the check
            # that holds (across replicas too) is the store's, as the record is added.
            usage = await self.store.files.usage(owner)
            if usage.count + 1 > self.limits.max_files:
                raise self._too_many_files(usage.count)
            created_at = time.time()
            record = FileRecord(
                id=f"file-{secrets.token_hex(12)}",
                owner=owner,
                filename=clean_filename(filename),
                purpose=purpose,
                bytes=0,
                created_at=created_at,
                end_user=self.end_user,
                expires_at=created_at + expires_after if expires_after is not None else None,
            )
            target = self.path(record)
            room = min(self.limits.max_file_bytes, self.limits.quota_bytes - usage.bytes)
            written = await asyncio.to_thread(_copy_capped, source, target, room)
            if written is None:
                if room < self.limits.max_file_bytes:
                    raise self._over_quota()
                raise self._too_large()
            record = dataclasses.replace(record, bytes=written)
            # Bytes without a record (a crash here) count against no quota: it sums records.
            try:
                before = await self.store.files.add_within(
                    record, max_files=self.limits.max_files, quota_bytes=self.limits.quota_bytes
                )
            except BaseException:
                await asyncio.to_thread(target.unlink, True)
                raise
            if before.count + 1 > self.limits.max_files:  # another replica's uploads came first
                await asyncio.to_thread(target.unlink, True)
                raise self._too_many_files(before.count)
            if before.bytes + written > self.limits.quota_bytes:
                await asyncio.to_thread(target.unlink, True)
                raise self._over_quota()
        return record

    def _too_many_files(self, count: int) -> APIError:
        return APIError(
            413,
            f"This key keeps {count} files, the most it may; delete some first.",
            code="too_many_files",
        )

    def _over_quota(self) -> APIError:
        return APIError(
            413,
            f"This key's files would take more than its quota of "
            f"{self.limits.quota_bytes} bytes; delete some first.",
            code="file_quota_exceeded",
        )

    def _too_large(self) -> APIError:
        return APIError(
            413,
            f"The file is larger than {self.limits.max_file_bytes} bytes.",
            code="file_too_large",
        )

    async def get(self, owner: str, file_id: str) -> FileRecord:
        """``owner``'s file ``file_id``; 404 for one that is not (or not theirs, or another
        end user's, or expired: every use of a file by id comes here, so an expired one is
        as deleted for all of them)."""
        record = await self.store.files.get(owner, file_id)
        if record is None or record.end_user not in (None, self.end_user):
            raise _not_found(file_id)
        return record

    async def get_readable(self, owner: str, file_id: str) -> FileRecord:
        """As :meth:`get`, for a use that reads the file's bytes: 404 too for one whose bytes
        are gone (a sweep of its expiry, or a delete, removed them since its record was read),
        as it will be once its record is, not a 500 where they are read."""
        record = await self.get(owner, file_id)
        if not await asyncio.to_thread(self.path(record).is_file):
            raise _not_found(file_id)
        return record

    async def list(
        self,
        owner: str,
        *,
        purpose: str | None,
        after: FileRecord | None,
        limit: int,
        newest_first: bool,
    ) -> list[FileRecord]:
        """``owner``'s files this view sees, newest first (or oldest), past ``after``."""
        return await self.store.files.list(
            owner,
            purpose=purpose,
            after=after,
            limit=limit,
            newest_first=newest_first,
            visible_to=self.end_user,
        )

    async def delete(self, owner: str, file_id: str) -> None:
        """Delete ``owner``'s file ``file_id``: an end user's own only (the key's shared
        files are the key's to delete); 404 otherwise."""
        record = await self.get(owner, file_id)
        if record.end_user != self.end_user:
            raise APIError(404, f"No file '{file_id}'.", param="file_id", code="file_not_found")
        if await self.store.files.delete(owner, file_id):
            await asyncio.to_thread(self.path(record).unlink, True)


def _not_found(file_id: str) -> APIError:
    return APIError(404, f"No file '{file_id}'.", param="file_id", code="file_not_found")


async def into_workspace(
    vault: FileVault | None,
    owner: str,
    part: dict[str, Any],
    workspace: Path,
    *,
    earlier: bool = False,
) -> str:
    """Copy the file a message's file ``part`` names (``file_id``: one of ``owner``'s uploads;
    or inline ``file_data``) into ``workspace``; the line the model reads instead. An upload
    deleted after it was placed here reads as its copy, if that is still there; in an
    ``earlier`` message (history) one that is not is a note, not an error."""
    file_id = part.get("file_id")
    if isinstance(file_id, str) and file_id:
        if vault is None:
            raise APIError(400, "This server keeps no files: send file_data instead.")
        try:
            record = await vault.get_readable(owner, file_id)
        except APIError as exc:
            if exc.status != 404:
                raise
            # Deleted since it was placed (the stored history still names it): the copy is
            # what the conversation refers to. Else only a new message's file is an error.
            line = await asyncio.to_thread(_placed_before, workspace, file_id, part)
            if line is not None:
                return line
            if earlier:
                return deleted_note(part)
            raise
        source: Path | bytes = vault.path(record)
        key, name = file_id, part.get("filename") or record.filename
    else:
        source = inline_bytes(part)
        key = "sha256:" + hashlib.sha256(source).hexdigest()
        name = part.get("filename")
    name = clean_filename(name if isinstance(name, str) else None)
    try:
        where, size = await asyncio.to_thread(_place, workspace, key, name, source)
    except QuotaExceeded as exc:
        message = f"{name} cannot be placed in the conversation's workspace: {exc.strerror}."
        raise APIError(413, message, code="workspace_quota_exceeded") from exc
    return f"[The user attached {name} ({size} bytes): it is in your workspace at {where}.]"


MAX_INLINE_IMAGE_BYTES = 20 * 1024 * 1024
"""The largest uploaded image a message may refer to (it is sent upstream inline)."""


async def image_data_url(vault: FileVault | None, owner: str, file_id: str) -> str:
    """An uploaded image as the ``data:`` URL an upstream takes in an ``image_url`` part.
    What it is, its bytes say, not its name: an image uploaded as bare bytes is named
    ``upload``, and a file named ``.png`` may be anything."""
    if vault is None:
        raise APIError(400, "This server keeps no files: send image_url instead.")
    record = await vault.get_readable(owner, file_id)
    if record.bytes > MAX_INLINE_IMAGE_BYTES:
        raise APIError(
            400,
            f"Image '{file_id}' is larger than {MAX_INLINE_IMAGE_BYTES} bytes.",
            param="input",
        )
    data = await asyncio.to_thread(vault.path(record).read_bytes)
    media_type = sniff_image_type(data)
    if media_type is None:
        raise APIError(
            400,
            f"File '{file_id}' ({record.filename}) is not an image (PNG, JPEG, GIF or WebP).",
            param="input",
        )
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def inline_bytes(part: dict[str, Any]) -> bytes:
    """The bytes of an inline file part (``file_data``: base64, or a ``data:`` URL)."""
    data = part.get("file_data")
    if not isinstance(data, str) or not data:
        raise APIError(400, "A file part needs a file_id or file_data.", param="messages")
    encoded = data.partition(",")[2] if data.startswith("data:") else data
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise APIError(400, "A file part's file_data is not valid base64.") from exc


def deleted_note(part: dict[str, Any]) -> str:
    """What the model reads of an earlier message's file whose upload was deleted since."""
    return unreadable_note(part, "it has been deleted since")


def unreadable_note(part: dict[str, Any], why: str) -> str:
    """What the model reads of a file it cannot be given, and ``why``."""
    name = clean_filename(part.get("filename") if isinstance(part.get("filename"), str) else None)
    reference = part.get("file_id") or "inline data"
    return f"[The user attached {name} ({reference}); it could not be read here: {why}.]"


def _copy_capped(source: BinaryIO, target: Path, limit: int) -> int | None:
    """Copy ``source`` to ``target``; None (and nothing left behind) past ``limit`` bytes."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    written = 0
    try:
        with partial.open("wb") as out:
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                if written > limit:
                    partial.unlink()
                    return None
                out.write(chunk)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written


def _place(root: Path, key: str, name: str, source: Path | bytes) -> tuple[str, int]:
    """Copy ``source`` into the workspace at ``root`` as ``name`` (or ``name (2)``, … when
    taken), unless ``key`` was placed there before and is still there; (path, size)."""
    workspace = Workspace(root)
    workspace.ensure()
    manifest_path = uploads_record(root)
    try:
        manifest: dict[str, str] = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        manifest = {}
    placed = manifest.get(key)
    if placed is not None:
        size = _size_if_file(workspace, placed)
        if size is not None:
            return placed, size
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    for candidate in _candidates(name):
        if not os.path.lexists(root / candidate):
            break
        if _holds(workspace, candidate, source, size):
            # The same file under the same name, placed from another upload (a client that
            # uploads a file again for a later turn): not a second copy.
            manifest[key] = candidate
            manifest_path.write_text(json.dumps(manifest))
            return candidate, size
    admit_write(root, size)  # the key's workspaces and the disk are held to their quotas
    descriptor = workspace.open(candidate, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    with os.fdopen(descriptor, "wb") as out:
        if isinstance(source, bytes):
            out.write(source)
        else:
            with source.open("rb") as file:
                shutil.copyfileobj(file, out, _CHUNK)
        size = out.tell()
    manifest[key] = candidate
    manifest_path.write_text(json.dumps(manifest))
    return candidate, size


def _placed_before(root: Path, key: str, part: dict[str, Any]) -> str | None:
    """The line for a file whose upload is gone but whose copy is still where it was placed;
    None when it was never placed here, or its copy is gone."""
    try:
        manifest: dict[str, str] = json.loads(uploads_record(root).read_text())
    except (OSError, ValueError):
        manifest = {}
    placed = manifest.get(key)
    size = _size_if_file(Workspace(root), placed) if placed is not None else None
    if placed is None or size is None:
        return None
    given = part.get("filename")
    name = clean_filename(given if isinstance(given, str) else placed)
    return f"[The user attached {name} ({size} bytes): it is in your workspace at {placed}.]"


def uploads_record(root: Path) -> Path:
    """Which uploads were placed in the workspace at ``root``, and where (beside it: the
    agent cannot change it; removed with the workspace, as it names the user's files)."""
    return root.parent / f"{root.name}.uploads.json"


def _holds(workspace: Workspace, relative: str, source: Path | bytes, size: int) -> bool:
    """Whether ``relative`` is a regular file of the workspace with ``source``'s bytes."""
    try:
        descriptor = workspace.open(relative, os.O_RDONLY)
    except (OutsideWorkspace, OSError):
        return False
    with os.fdopen(descriptor, "rb") as placed:  # a regular file: Workspace.open says so
        if os.fstat(descriptor).st_size != size:
            return False
        if isinstance(source, bytes):
            return placed.read(size + 1) == source
        with source.open("rb") as original:
            while chunk := original.read(_CHUNK):
                if placed.read(len(chunk)) != chunk:
                    return False
            return not placed.read(1)


def _size_if_file(workspace: Workspace, relative: str) -> int | None:
    """The size of ``relative`` if it is still a regular file of the workspace (the agent's
    commands may have replaced it by anything: a link out, a FIFO no one writes to)."""
    try:
        descriptor = workspace.open(relative, os.O_RDONLY)
    except (OutsideWorkspace, OSError):
        return None
    try:
        return os.fstat(descriptor).st_size
    finally:
        os.close(descriptor)


def _candidates(name: str) -> Iterator[str]:
    """Names to place ``name`` under, in order, each short enough for the file system."""
    stem, dot, suffix = name.rpartition(".")
    if dot and stem and len(suffix.encode()) <= _MAX_SUFFIX_BYTES:
        suffix = f".{suffix}"
    else:
        stem, suffix = name, ""
    yield _fitted(stem, suffix)
    for n in range(2, 10_000):
        yield _fitted(stem, suffix, f" ({n})")
    yield _fitted(f"{secrets.token_hex(8)}-{stem}", suffix)


NAME_MAX_BYTES = 255
"""The longest name a file may have on Linux file systems, in bytes: 255 characters of a
non-Latin script are two or three times that (the copy then failed, a 500)."""
_MAX_SUFFIX_BYTES = 32
"""A longer "extension" is no extension: cutting the name keeps nothing of it."""


def _fitted(stem: str, suffix: str, mark: str = "") -> str:
    """``stem + mark + suffix``, the stem cut short (at a whole character) to fit NAME_MAX_BYTES."""
    room = NAME_MAX_BYTES - len((mark + suffix).encode())
    return stem.encode()[:room].decode(errors="ignore") + mark + suffix


def _digest(owner: str) -> str:
    return hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()[:16]
