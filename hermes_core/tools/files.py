"""The ``files`` toolset: read, write, edit, list and search the files of the run's workspace.

Each tool takes paths relative to the workspace (see :mod:`hermes_core.tools.workspace`) and
answers problems with an ``Error: …`` the model can act on: a missing file, an ambiguous edit,
a path outside the workspace, a FIFO. Results that would be large are cut, and say where and
how to read on. The handlers are plain functions: they block on the disk, so the executor runs
them in its tool threads. What they read is bounded whatever the files (``file_scan.py``): a
page is read in chunks until it is full, a search stops at its deadline or its byte limit, and
patterns run on RE2 (``file_search.py``), never on a backtracking engine.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hermes_core.tools.documents import DocumentUnreadable, document_kind, text_of
from hermes_core.tools.file_pages import MAX_LINE_CHARS, clip_line, decoded, read_page
from hermes_core.tools.file_scan import (
    Budget,
    ScanStopped,
    is_binary,
    line_blocks,
    regular_files,
)
from hermes_core.tools.file_search import LinePattern, PatternError
from hermes_core.tools.quota import admit_write
from hermes_core.tools.registry import Tool, ToolContext
from hermes_core.tools.sandbox_settings import SandboxPolicy
from hermes_core.tools.workspace import OutsideWorkspace, Workspace

__all__ = ["MAX_LINE_CHARS", "file_tools"]

READ_LINES = 2000
"""Lines ``read_file`` shows at most per call."""
MAX_RESULT_CHARS = 60_000
"""Characters any file tool returns at most (then it says what it left out)."""
MAX_LISTED = 500
MAX_MATCHES = 200
MAX_COUNTED = 10_000
"""Matches ``search_files`` counts beyond those it shows before it stops: each costs Python
work (with the GIL held) that tells the model nothing more than "many"."""
MAX_WRITE_BYTES = 10 * 1024 * 1024
MAX_EDIT_BYTES = 10 * 1024 * 1024
"""``edit_file`` reads the whole file and writes it back: larger files are refused."""
BINARY_SNIFF = 8192
TEXT_ENDINGS = (".csv", ".tsv")
"""Read as text even when not UTF-8 (a spreadsheet's export): shown with U+FFFD for what is
not, rather than refused as binary."""
TOOL_TIMEOUT_S = 30.0
"""The executor's deadline for a file tool: a backstop well past the calls' own
(``file_scan.DEADLINE_S``), which end them with what they found so far."""


def _workspace(ctx: ToolContext) -> Workspace:
    if ctx.workspace is None:
        raise OutsideWorkspace("This conversation has no workspace: file tools are unavailable.")
    return Workspace(ctx.workspace)


def _budget(ctx: ToolContext) -> Budget:
    return Budget(is_interrupted=ctx.is_interrupted)


def _text_arg(arguments: dict[str, Any], name: str, default: str | None = None) -> str:
    value = arguments.get(name, default)
    if not isinstance(value, str):
        raise OutsideWorkspace(f"'{name}' must be a string.")
    return value


def _int_arg(arguments: dict[str, Any], name: str, default: int, *, least: int) -> int:
    value = arguments.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise OutsideWorkspace(f"'{name}' must be a whole number of at least {least}.")
    return value


def _errors(handler: Any) -> Any:
    """Every refusal and disk error as an ``Error: …`` result, with the workspace's path
    never shown (the model knows paths relative to it only)."""

    def wrapped(arguments: dict[str, Any], ctx: ToolContext, **options: Any) -> str:
        try:
            result: str = handler(arguments, ctx, **options)
        except (OutsideWorkspace, PatternError, DocumentUnreadable) as exc:
            return f"Error: {exc}"
        except ScanStopped as exc:
            return f"Error: {handler.__name__} stopped before it was done: {exc}."
        except FileNotFoundError:
            return "Error: no such file in the workspace (list_files shows what there is)."
        except IsADirectoryError:
            return "Error: that is a directory; give a file's path (list_files shows them)."
        except NotADirectoryError:
            return "Error: a part of that path is a file, not a directory."
        except OSError as exc:
            return f"Error: {exc.strerror or type(exc).__name__}."
        return result

    wrapped.__name__ = handler.__name__
    return wrapped


@contextmanager
def _opened(workspace: Workspace, relative: str) -> Iterator[int]:
    """``relative`` open for reading: a regular file, never waited on (see Workspace.open)."""
    descriptor = workspace.open(relative, os.O_RDONLY)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def _sniffed_binary(descriptor: int) -> bool:
    return is_binary(os.pread(descriptor, BINARY_SNIFF, 0))


# --- read_file ------------------------------------------------------------------------------------


@_errors
def read_file(
    arguments: dict[str, Any], ctx: ToolContext, *, policy: SandboxPolicy | None = None
) -> str:
    """``policy``: the sandbox documents are extracted in (the default one when None)."""
    workspace = _workspace(ctx)
    relative = _text_arg(arguments, "path")
    offset = _int_arg(arguments, "offset", 1, least=1)
    limit = min(_int_arg(arguments, "limit", READ_LINES, least=1), READ_LINES)
    with _opened(workspace, relative) as descriptor:
        size = os.fstat(descriptor).st_size
        kind = document_kind(relative, os.pread(descriptor, 8, 0))
        if kind is not None:
            # Its text, extracted in the sandbox, paged like a text file's lines.
            text = text_of(descriptor, kind, policy=policy or SandboxPolicy()).encode()
            size = len(text)
            with _in_memory(text) as text_descriptor:
                page = read_page(
                    text_descriptor, _budget(ctx), offset, limit, room=MAX_RESULT_CHARS - 200
                )
        elif _sniffed_binary(descriptor) and not _text_export(relative, descriptor):
            return f"[{relative} is a binary file of {size} bytes; it is not shown as text.]"
        else:
            # Room is left for the line saying how to read on.
            page = read_page(descriptor, _budget(ctx), offset, limit, room=MAX_RESULT_CHARS - 200)
    if not page.rows:
        if page.lines_seen == 0:
            return f"[{relative} is empty.]"
        return f"Error: {relative} has {page.lines_seen} lines; offset {offset} is past its end."
    end = page.rows[-1][0]
    width = len(str(end))
    out = [f"{number:>{width}}\t{row}" for number, row in page.rows]
    if not page.ended:
        out.append(
            f"[… showing lines {offset}–{end} of a longer file ({size} bytes); "
            f"read on with offset={end + 1}]"
        )
    elif end < page.lines_seen:
        out.append(
            f"[… showing lines {offset}–{end} of {page.lines_seen}; read on with offset={end + 1}]"
        )
    return "\n".join(out)


def _text_export(relative: str, descriptor: int) -> bool:
    return relative.lower().endswith(TEXT_ENDINGS) and b"\0" not in os.pread(
        descriptor, BINARY_SNIFF, 0
    )


@contextmanager
def _in_memory(data: bytes) -> Iterator[int]:
    """``data`` as a file descriptor (in memory, gone once closed)."""
    descriptor = os.memfd_create("document-text")
    try:
        os.write(descriptor, data)  # a memfd takes it all in one write
        os.lseek(descriptor, 0, os.SEEK_SET)
        yield descriptor
    finally:
        os.close(descriptor)


# --- write_file and edit_file ---------------------------------------------------------------------


@_errors
def write_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    relative = _text_arg(arguments, "path")
    data = _text_arg(arguments, "content").encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        return f"Error: content of {len(data)} bytes; a file may be at most {MAX_WRITE_BYTES}."
    path = workspace.path(relative)
    workspace.makedirs(workspace.relative(path.parent))
    existed = os.path.lexists(path)
    _write(workspace, relative, data)
    verb = "Overwrote" if existed else "Created"
    return f"{verb} {relative} ({len(data)} bytes)."


def _write(workspace: Workspace, relative: str, data: bytes) -> None:
    admit_write(workspace.ensure(), len(data), replacing=workspace.path(relative))
    descriptor = workspace.open(relative, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _read_for_edit(workspace: Workspace, relative: str) -> str | None:
    """The file's text (None when binary); refused past MAX_EDIT_BYTES, read in chunks."""
    with _opened(workspace, relative) as descriptor:
        size = os.fstat(descriptor).st_size
        if size > MAX_EDIT_BYTES:
            raise OutsideWorkspace(
                f"'{relative}' has {size} bytes; edit_file edits files of at most "
                f"{MAX_EDIT_BYTES} bytes (use the shell, e.g. sed, for larger ones)."
            )
        if _sniffed_binary(descriptor):
            return None
        chunks: list[bytes] = []
        read = 0
        # Read to the cap, not to the size fstat saw: the file may be growing meanwhile.
        while chunk := os.read(descriptor, min(1024 * 1024, MAX_EDIT_BYTES + 1 - read)):
            chunks.append(chunk)
            read += len(chunk)
            if read > MAX_EDIT_BYTES:
                raise OutsideWorkspace(f"'{relative}' grew past {MAX_EDIT_BYTES} bytes.")
    return b"".join(chunks).decode("utf-8", errors="replace")


@_errors
def edit_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    relative = _text_arg(arguments, "path")
    old, new = _text_arg(arguments, "old_text"), _text_arg(arguments, "new_text")
    replace_all = arguments.get("replace_all", False) is True
    if not old:
        return "Error: old_text is empty; give the exact text to replace."
    text = _read_for_edit(workspace, relative)
    if text is None:
        return f"Error: {relative} is a binary file; it cannot be edited as text."
    count = text.count(old)
    if count == 0:
        hint = (
            " (it differs only in case or whitespace somewhere)" if _loosely_in(old, text) else ""
        )
        return (
            f"Error: old_text was not found in {relative}{hint}. Read the file and copy the "
            "exact text to replace, whitespace and indentation included."
        )
    if count > 1 and not replace_all:
        lines = _lines_of(text, old)
        return (
            f"Error: old_text occurs {count} times in {relative} (lines {lines}). Include more "
            "of the surrounding text to make it unique, or set replace_all to true."
        )
    edited = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    _write(workspace, relative, edited.encode("utf-8"))
    done = f"{count} occurrences" if count > 1 else "1 occurrence"
    return f"Edited {relative}: replaced {done}."


def _loosely_in(needle: str, haystack: str) -> bool:
    # A fixed pattern of our own (no nesting, no backtracking blow-up): Python's re is fine.
    squeeze = re.compile(r"\s+")
    return squeeze.sub(" ", needle).strip().lower() in squeeze.sub(" ", haystack).lower()


def _lines_of(text: str, needle: str, most: int = 10) -> str:
    found: list[str] = []
    start = text.find(needle)
    while start != -1 and len(found) < most:
        found.append(str(text.count("\n", 0, start) + 1))
        start = text.find(needle, start + 1)
    return ", ".join(found)


# --- list_files and search_files ------------------------------------------------------------------


def _matching_files(
    workspace: Workspace, relative: str, pattern: str, budget: Budget
) -> Iterator[tuple[str, int]]:
    """The workspace's regular files under ``relative`` whose path or name matches the glob
    ``pattern``: (their path as the tools name it, their size)."""
    root = workspace.ensure()
    for path, info in regular_files(workspace.path(relative), budget):
        name = path.relative_to(root).as_posix()
        if fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(path.name, pattern):
            yield name, info.st_size


@_errors
def list_files(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    pattern = _text_arg(arguments, "pattern", "*")
    relative = _text_arg(arguments, "path", ".")
    rows: list[str] = []
    total = 0
    stopped = ""
    try:
        for name, size in _matching_files(workspace, relative, pattern, _budget(ctx)):
            total += 1
            if len(rows) < MAX_LISTED:
                rows.append(f"{name}\t{size} bytes")
    except ScanStopped as exc:
        stopped = f"[listing stopped early: {exc}; narrow the path]"
    if not rows and not stopped:
        return f"No files match '{pattern}' under '{relative}'."
    if total > len(rows):
        rows.append(f"[… {total - len(rows)} more; narrow the pattern or the path]")
    if stopped:
        rows.append(stopped)
    return "\n".join(rows)


@_errors
def search_files(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    source = _text_arg(arguments, "pattern")
    relative = _text_arg(arguments, "path", ".")
    include = _text_arg(arguments, "glob", "*")
    pattern = LinePattern(source)
    budget = _budget(ctx)
    rows: list[str] = []
    matches = 0
    stopped = ""
    try:
        for name, _ in _matching_files(workspace, relative, include, budget):
            for number, line, cut in _search_file(workspace, name, pattern, budget):
                matches += 1
                if len(rows) < MAX_MATCHES:
                    rows.append(f"{name}:{number}: {clip_line(decoded(line), cut)}")
                elif matches > MAX_COUNTED:
                    raise ScanStopped(f"it counted {MAX_COUNTED} matches")
    except ScanStopped as exc:
        stopped = f"[search stopped early: {exc}; narrow the pattern, the path or the glob]"
    if not rows and not stopped:
        return f"No line matches /{source}/ under '{relative}'."
    if matches > len(rows):
        rows.append(f"[… {matches - len(rows)} more matches; narrow the pattern or the path]")
    if stopped:
        rows.append(stopped)
    return "\n".join(rows)


def _search_file(
    workspace: Workspace, name: str, pattern: LinePattern, budget: Budget
) -> Iterator[tuple[int, bytes, int | None]]:
    """The lines of text file ``name`` that ``pattern`` matches: their numbers, their text
    (kept to a chunk) and, if cut, the bytes they had. Nothing for a binary file or one that
    is no longer a regular file."""
    try:
        with _opened(workspace, name) as descriptor:
            if _sniffed_binary(descriptor):
                return
            for block in line_blocks(descriptor, budget):
                for number, line in pattern.matching_lines(block):
                    yield number, line, block.cut.get(number)
    except (OutsideWorkspace, OSError):
        return  # replaced (by a link, a FIFO) or removed since the walk: not searched


# --- the toolset ----------------------------------------------------------------------------------


def _path_schema(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def file_tools(*, approval: str = "never", policy: SandboxPolicy | None = None) -> list[Tool]:
    """The ``files`` toolset. Its paths cannot leave the workspace, so no call is *dangerous*;
    with the ``always`` approval policy, the calls that change files ask first. ``read_file``
    extracts documents' text in the sandbox ``policy`` describes."""

    def read(arguments: dict[str, Any], ctx: ToolContext) -> str:
        return str(read_file(arguments, ctx, policy=policy))

    path = _path_schema("A path relative to the workspace, e.g. 'src/app.py'.")
    ask = (lambda arguments: "it changes a file") if approval == "always" else None
    tools = [
        Tool(
            name="read_file",
            description=(
                "Read a text file of the workspace, with line numbers; PDF, DOCX, XLSX and PPTX "
                "files as their text, with page, sheet and slide markers. Long files come in "
                "pages: use offset (first line, from 1) and limit (lines)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": path,
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            },
            handler=read,
            timeout=TOOL_TIMEOUT_S,
            max_result_chars=MAX_RESULT_CHARS,
        ),
        Tool(
            name="write_file",
            description="Create or overwrite a text file of the workspace with content.",
            parameters={
                "type": "object",
                "properties": {"path": path, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
            handler=write_file,
            timeout=TOOL_TIMEOUT_S,
            concurrent_safe=False,
            needs_approval=ask,
            summarize=lambda args: f"write_file {args.get('path', '')}",
        ),
        Tool(
            name="edit_file",
            description=(
                "Replace old_text with new_text in a file. old_text must match exactly, "
                "whitespace included, and once (or set replace_all)."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": path,
                    "old_text": {"type": "string"},
                    "new_text": {"type": "string"},
                    "replace_all": {"type": "boolean"},
                },
                "required": ["path", "old_text", "new_text"],
            },
            handler=edit_file,
            timeout=TOOL_TIMEOUT_S,
            concurrent_safe=False,
            needs_approval=ask,
            summarize=lambda args: f"edit_file {args.get('path', '')}",
        ),
        Tool(
            name="list_files",
            description=(
                "List the workspace's files (recursively) whose path or name matches a glob "
                "pattern such as '*.py' or 'data/*.csv', with their sizes."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A glob; default '*'."},
                    "path": _path_schema("The directory to list; default the whole workspace."),
                },
            },
            handler=list_files,
            timeout=TOOL_TIMEOUT_S,
            max_result_chars=MAX_RESULT_CHARS,
        ),
        Tool(
            name="search_files",
            description=(
                "Search the workspace's text files for a regular expression; answers "
                "'path:line: text' for each matching line."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "pattern": {
                        "type": "string",
                        "description": (
                            "A regular expression (RE2 syntax: no backreferences or "
                            "lookaround), matched within each line."
                        ),
                    },
                    "path": _path_schema("Where to search; default the whole workspace."),
                    "glob": {"type": "string", "description": "Only files matching this glob."},
                },
                "required": ["pattern"],
            },
            handler=search_files,
            timeout=TOOL_TIMEOUT_S,
            max_result_chars=MAX_RESULT_CHARS,
        ),
    ]
    return [dataclasses.replace(tool, toolset="files") for tool in tools]
