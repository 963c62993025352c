"""Reading and checking a skill in the Agent Skills format: a folder with a ``SKILL.md``.

A skill's files come from strangers (an upload, a zip, a model writing its own skill), so every
way in goes through the same checks before anything is kept or written to disk: a ``SKILL.md``
with a YAML front matter naming the skill and saying what it is for; relative paths only (no
``..``, no absolute paths, no links); and limits on the number of files and their sizes, held
on the sizes a zip declares *and* on the bytes it really unpacks to (a zip bomb lies).

A :class:`SkillError` is the one way a check fails; its message says what was wrong in words
safe to show the uploader.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from hermes_core.skills.library import SKILL_FILE, SkillBundle

MAX_SKILL_BYTES = 8 * 1024 * 1024
"""All of a skill's files together, unpacked."""
MAX_SKILL_FILES = 200
MAX_SKILL_MD_BYTES = 256 * 1024
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_ZIP_BYTES = MAX_SKILL_BYTES + 2 * 1024 * 1024
"""A zip's own size: what it unpacks to plus room for its headers (stored, not compressed)."""
MAX_PATH_CHARS = 512
MAX_PATH_PART_BYTES = 255
"""One file or folder name, in UTF-8 bytes: what a filesystem holds (``NAME_MAX``). A longer
one would pass every other check yet never unpack for a run."""

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_FRONT_MATTER_FENCE = "---"
# What archivers and file managers leave beside a user's files: never part of a skill.
_JUNK_PARTS = frozenset({"__MACOSX", ".DS_Store", "Thumbs.db", ".git", "__pycache__"})
# One fixed timestamp, so the same skill always zips to the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_READ_CHUNK = 64 * 1024


class SkillError(ValueError):
    """A skill breaks the format or a limit; the message says what, safe to show."""


@dataclass(frozen=True, slots=True)
class SkillManifest:
    """What a ``SKILL.md`` says: its front matter's name and description, the markdown after
    it, and the front matter's other keys (``license``, ``allowed-tools``, ...)."""

    name: str
    description: str
    body: str
    metadata: dict[str, Any] = field(default_factory=dict)


def parse_skill_md(text: str) -> SkillManifest:
    """Read a ``SKILL.md``: a YAML front matter between ``---`` lines, then markdown."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_SKILL_MD_BYTES:
        raise SkillError(f"{SKILL_FILE} is larger than {MAX_SKILL_MD_BYTES} bytes")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n")
    lines = text.split("\n")
    if not lines or lines[0].strip() != _FRONT_MATTER_FENCE:
        raise SkillError(f"{SKILL_FILE} must start with a YAML front matter between '---' lines")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == _FRONT_MATTER_FENCE)
    except StopIteration:
        raise SkillError(f"{SKILL_FILE}'s front matter has no closing '---' line") from None
    try:
        front = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        reason = getattr(exc, "problem", None) or "not valid YAML"
        raise SkillError(f"{SKILL_FILE}'s front matter is not valid YAML: {reason}") from None
    except (ValueError, TypeError, RecursionError):
        # Parsed, then no value could be built from it: ``2001-02-30``, ``!!int x``, or
        # nesting deeper than Python's stack (PyYAML raises these unwrapped).
        raise SkillError(
            f"{SKILL_FILE}'s front matter is not valid YAML: a value cannot be read"
        ) from None
    if not isinstance(front, dict):
        raise SkillError(f"{SKILL_FILE}'s front matter must be a mapping of keys to values")
    metadata = {str(key): value for key, value in front.items()}
    name = metadata.pop("name", None)
    description = metadata.pop("description", None)
    name = _check_name(name)
    description = _check_description(description)
    body = "\n".join(lines[end + 1 :]).lstrip("\n")
    return SkillManifest(name=name, description=description.strip(), body=body, metadata=metadata)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise SkillError(f"{SKILL_FILE}'s front matter needs a 'name'")
    if len(name) > MAX_NAME_CHARS:
        raise SkillError(f"the skill's name is longer than {MAX_NAME_CHARS} characters")
    if not _NAME.fullmatch(name):
        raise SkillError(
            f"the skill's name {name[:MAX_NAME_CHARS]!r} may hold only lowercase letters, digits "
            "and single hyphens between them"
        )
    return name


def _check_description(description: object) -> str:
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{SKILL_FILE}'s front matter needs a 'description'")
    if len(description.strip()) > MAX_DESCRIPTION_CHARS:
        raise SkillError(
            f"the skill's description is longer than {MAX_DESCRIPTION_CHARS} characters"
        )
    return description


def skill_markdown(name: str, description: str, body: str) -> str:
    """The text of a ``SKILL.md`` for ``name`` and ``description`` with ``body`` below."""
    _check_name(name)
    _check_description(description)
    front = yaml.safe_dump(
        {"name": name, "description": description.strip()},
        sort_keys=False,
        allow_unicode=True,
        width=10_000,
    )
    return f"---\n{front}---\n\n{body.strip()}\n"


def bundle_from_files(files: Sequence[tuple[str, bytes]]) -> SkillBundle:
    """A skill from uploaded files and their relative paths. A single ``.zip`` is unpacked;
    one folder holding everything (``my-skill/SKILL.md``, ...) is taken as the skill's."""
    if len(files) == 1 and files[0][0].lower().endswith(".zip"):
        return bundle_from_zip(files[0][1])
    if len(files) > MAX_SKILL_FILES:
        raise SkillError(f"a skill may hold at most {MAX_SKILL_FILES} files")
    total = sum(len(data) for _, data in files)
    if total > MAX_SKILL_BYTES:
        raise SkillError(f"a skill's files may take at most {MAX_SKILL_BYTES} bytes")
    return _bundle(files, strip_top=True)


def bundle_from_zip(data: bytes) -> SkillBundle:
    """A skill from a zip of its folder (or of a folder holding it)."""
    if len(data) > MAX_ZIP_BYTES:
        raise SkillError(f"the zip is larger than {MAX_ZIP_BYTES} bytes")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise SkillError("the upload is not a readable zip file") from None
    with archive:
        entries = [info for info in archive.infolist() if not info.is_dir()]
        if len(entries) > MAX_SKILL_FILES:
            raise SkillError(f"a skill may hold at most {MAX_SKILL_FILES} files")
        for info in entries:
            if info.flag_bits & 0x1:
                raise SkillError(f"{_shown(info.filename)} is encrypted")
            if stat.S_ISLNK(info.external_attr >> 16):
                raise SkillError(f"{_shown(info.filename)} is a symbolic link")
        if sum(info.file_size for info in entries) > MAX_SKILL_BYTES:
            raise SkillError(f"a skill's files may take at most {MAX_SKILL_BYTES} bytes unpacked")
        files: list[tuple[str, bytes]] = []
        budget = MAX_SKILL_BYTES
        for info in entries:
            content = _unpack(archive, info, limit=min(info.file_size, budget))
            budget -= len(content)
            files.append((info.filename, content))
    return _bundle(files, strip_top=True)


def _unpack(archive: zipfile.ZipFile, info: zipfile.ZipInfo, *, limit: int) -> bytes:
    """``info``'s bytes, read no further than ``limit``: its declared size is checked, but
    the stream itself is what counts (the header can lie)."""
    out = bytearray()
    try:
        with archive.open(info) as stream:
            while chunk := stream.read(_READ_CHUNK):
                out += chunk
                if len(out) > limit:
                    raise SkillError(
                        f"{_shown(info.filename)} unpacks to more than its declared size or "
                        "the skill's limit"
                    )
    except (zipfile.BadZipFile, NotImplementedError, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, SkillError):
            raise
        raise SkillError(f"{_shown(info.filename)} cannot be unpacked from the zip") from None
    return bytes(out)


def checked_bundle(bundle: SkillBundle) -> SkillBundle:
    """``bundle`` checked as an upload is (one made in code, e.g. by the agent's
    ``skill_manage``): its paths, limits and ``SKILL.md``; name and description re-read."""
    if len(bundle.files) > MAX_SKILL_FILES:
        raise SkillError(f"a skill may hold at most {MAX_SKILL_FILES} files")
    return _bundle(list(bundle.files.items()), strip_top=False)


def bundle_to_zip(bundle: SkillBundle) -> bytes:
    """``bundle`` as a zip: its files in path order with fixed times and modes, so the same
    skill always gives the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(bundle.files):
            info = zipfile.ZipInfo(_check_path(path), date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so the mode below means what it says
            info.external_attr = (stat.S_IFREG | _mode(bundle.files[path])) << 16
            archive.writestr(info, bundle.files[path], compresslevel=6)
    return buffer.getvalue()


def read_skill_folder(path: Path) -> SkillBundle:
    """The skill in the folder ``path`` (a profile's skills directory holds such folders)."""
    if not path.is_dir():
        raise SkillError(f"{path.name!r} is not a folder")
    found: list[Path] = []
    for root, dirs, names in os.walk(path, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _JUNK_PARTS)
        for directory in dirs:
            if (Path(root) / directory).is_symlink():
                raise SkillError(f"{_relative(path, Path(root) / directory)} is a symbolic link")
        for name in sorted(names):
            if name in _JUNK_PARTS:
                continue
            file = Path(root) / name
            if file.is_symlink() or not file.is_file():
                raise SkillError(f"{_relative(path, file)} is not a plain file")
            found.append(file)
            if len(found) > MAX_SKILL_FILES:
                raise SkillError(f"a skill may hold at most {MAX_SKILL_FILES} files")
    files: list[tuple[str, bytes]] = []
    budget = MAX_SKILL_BYTES
    for file in found:
        with file.open("rb") as stream:
            content = stream.read(budget + 1)
        budget -= len(content)
        if budget < 0:
            raise SkillError(f"a skill's files may take at most {MAX_SKILL_BYTES} bytes")
        files.append((_relative(path, file), content))
    return _bundle(files, strip_top=False)


def write_bundle(bundle: SkillBundle, target: Path) -> None:
    """Write ``bundle``'s files into the new folder ``target`` (which must not exist): into a
    temporary sibling first, renamed into place once whole, so a reader never sees half a
    skill. :class:`FileExistsError` when ``target`` exists (or appeared meanwhile)."""
    if target.exists():
        raise FileExistsError(str(target))
    paths = {_check_path(path): content for path, content in bundle.files.items()}
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for path, content in sorted(paths.items()):
            file = staging.joinpath(*PurePosixPath(path).parts)
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(content)
            file.chmod(_mode(content))
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:
            if target.exists():
                raise FileExistsError(str(target)) from None
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _bundle(files: Sequence[tuple[str, bytes]], *, strip_top: bool) -> SkillBundle:
    """The checked bundle of ``files``: paths made relative and checked, junk left out,
    one common top folder stripped when ``strip_top``, and the ``SKILL.md`` read."""
    out = _paths(files, strip_top=strip_top)
    if SKILL_FILE not in out:
        raise SkillError(f"a skill needs a {SKILL_FILE} at the top of its folder")
    if len(out) > MAX_SKILL_FILES:
        raise SkillError(f"a skill may hold at most {MAX_SKILL_FILES} files")
    if sum(len(content) for content in out.values()) > MAX_SKILL_BYTES:
        raise SkillError(f"a skill's files may take at most {MAX_SKILL_BYTES} bytes")
    skill_md = out[SKILL_FILE]
    if len(skill_md) > MAX_SKILL_MD_BYTES:
        raise SkillError(f"{SKILL_FILE} is larger than {MAX_SKILL_MD_BYTES} bytes")
    try:
        text = skill_md.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillError(f"{SKILL_FILE} is not UTF-8 text") from None
    manifest = parse_skill_md(text)
    return SkillBundle(
        name=manifest.name,
        description=manifest.description,
        files=dict(sorted(out.items())),
    )


def _paths(files: Sequence[tuple[str, bytes]], *, strip_top: bool) -> dict[str, bytes]:
    """``files`` by their checked relative paths, junk left out, one common top folder
    stripped when ``strip_top``."""
    kept: list[tuple[tuple[str, ...], bytes]] = []
    for raw, content in files:
        parts = _parts(raw)
        if parts is None:
            continue
        kept.append((parts, content))
    if not kept:
        raise SkillError(f"the upload holds no files (a skill needs a {SKILL_FILE})")
    if strip_top:
        tops = {parts[0] for parts, _ in kept}
        if len(tops) == 1 and all(len(parts) > 1 for parts, _ in kept):
            kept = [(parts[1:], content) for parts, content in kept]
    out: dict[str, bytes] = {}
    for parts, content in kept:
        path = "/".join(parts)
        if path in out or any(other.startswith(path + "/") for other in out):
            raise SkillError(f"{_shown(path)} appears twice in the upload")
        if any(path.startswith(other + "/") for other in out):
            raise SkillError(f"{_shown(path)} is both a file and a folder in the upload")
        out[path] = content
    return out


def _parts(raw: str) -> tuple[str, ...] | None:
    """``raw``'s path parts once checked; None for an archiver's junk (``__MACOSX/``, ...)."""
    if not raw or len(raw) > MAX_PATH_CHARS:
        raise SkillError(f"{_shown(raw)} is not an acceptable file name")
    if "\\" in raw or "\x00" in raw or any(ord(ch) < 0x20 for ch in raw) or _lone_surrogate(raw):
        raise SkillError(f"{_shown(raw)} holds a character a skill's paths may not hold")
    if raw.startswith("/") or re.match(r"[A-Za-z]:", raw):
        raise SkillError(f"{_shown(raw)} is an absolute path; a skill's paths are relative")
    parts = tuple(part for part in raw.split("/") if part not in ("", "."))
    if ".." in parts:
        raise SkillError(f"{_shown(raw)} climbs out of the skill's folder")
    if not parts:
        raise SkillError(f"{_shown(raw)} is not an acceptable file name")
    if any(len(part.encode("utf-8")) > MAX_PATH_PART_BYTES for part in parts):
        raise SkillError(
            f"{_shown(raw)} has a name too long for a folder to hold "
            f"(at most {MAX_PATH_PART_BYTES} bytes a name)"
        )
    if any(part in _JUNK_PARTS for part in parts):
        return None
    return parts


def _lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (a model's JSON can spell one): no file name
    on disk can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_path(path: str) -> str:
    """``path`` if it is already a clean relative path (a bundle built elsewhere is checked
    again before anything is written from it)."""
    parts = _parts(path)
    if parts is None or "/".join(parts) != path:
        raise SkillError(f"{_shown(path)} is not a clean relative path")
    return path


def _mode(content: bytes) -> int:
    """A script (``#!``) is executable, so the sandbox can run it by its path."""
    return 0o755 if content.startswith(b"#!") else 0o644


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _shown(path: str) -> str:
    """``path`` quoted and cut short, to name it in an error without echoing a huge value."""
    return repr(path[:120] + ("..." if len(path) > 120 else ""))
