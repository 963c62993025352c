"""The ``files`` toolset: read, write, edit, list and search the files of the run's workspace.

Each tool takes paths relative to the workspace (see :mod:`hermes_core.tools.workspace`) and
answers problems with an ``Error: …`` the model can act on: a missing file, an ambiguous edit,
a path outside the workspace. Results that would be large are cut, and say where and how to
read on. The handlers are plain functions: they block on the disk, so the executor runs them
in worker threads.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hermes_core.tools.registry import Tool, ToolContext
from hermes_core.tools.workspace import OutsideWorkspace, Workspace

READ_LINES = 2000
"""Lines ``read_file`` shows at most per call."""
MAX_RESULT_CHARS = 60_000
"""Characters any file tool returns at most (then it says what it left out)."""
MAX_LINE_CHARS = 2000
"""A longer line is cut in ``read_file`` and ``search_files`` output."""
MAX_LISTED = 500
MAX_MATCHES = 200
MAX_WRITE_BYTES = 10 * 1024 * 1024
BINARY_SNIFF = 8192
SKIPPED_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv"})
"""Directories listings and searches pass over unless asked into them."""


def _workspace(ctx: ToolContext) -> Workspace:
    if ctx.workspace is None:
        raise OutsideWorkspace("This conversation has no workspace: file tools are unavailable.")
    return Workspace(ctx.workspace)


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

    def wrapped(arguments: dict[str, Any], ctx: ToolContext) -> str:
        try:
            result: str = handler(arguments, ctx)
        except OutsideWorkspace as exc:
            return f"Error: {exc}"
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


def _is_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(head) - 4  # a character cut at the end of the sample is fine
    return False


def _read_text(workspace: Workspace, relative: str) -> str | None:
    """The file's text, or None when it is binary."""
    descriptor = workspace.open(relative, os.O_RDONLY)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OutsideWorkspace(f"'{relative}' is not a regular file.")
        data = file.read()
    if _is_binary(data[:BINARY_SNIFF]):
        return None
    return data.decode("utf-8", errors="replace")


def _clip_line(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}… [line cut: {len(line)} characters]"


# --- read_file ------------------------------------------------------------------------------------


@_errors
def read_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    relative = _text_arg(arguments, "path")
    offset = _int_arg(arguments, "offset", 1, least=1)
    limit = _int_arg(arguments, "limit", READ_LINES, least=1)
    text = _read_text(workspace, relative)
    if text is None:
        size = workspace.path(relative).stat().st_size
        return f"[{relative} is a binary file of {size} bytes; it is not shown as text.]"
    lines = text.splitlines()
    if not lines:
        return f"[{relative} is empty.]"
    if offset > len(lines):
        return f"Error: {relative} has {len(lines)} lines; offset {offset} is past its end."
    end = min(offset - 1 + min(limit, READ_LINES), len(lines))
    width = len(str(end))
    out: list[str] = []
    used = 0
    for number in range(offset, end + 1):
        row = f"{number:>{width}}\t{_clip_line(lines[number - 1])}"
        used += len(row) + 1
        if used > MAX_RESULT_CHARS:
            end = number - 1
            break
        out.append(row)
    if end < len(lines):
        out.append(
            f"[… showing lines {offset}–{end} of {len(lines)}; read on with offset={end + 1}]"
        )
    return "\n".join(out)


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
    existed = path.exists()
    _write(workspace, relative, data)
    verb = "Overwrote" if existed else "Created"
    return f"{verb} {relative} ({len(data)} bytes)."


def _write(workspace: Workspace, relative: str, data: bytes) -> None:
    descriptor = workspace.open(relative, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


@_errors
def edit_file(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    relative = _text_arg(arguments, "path")
    old, new = _text_arg(arguments, "old_text"), _text_arg(arguments, "new_text")
    replace_all = arguments.get("replace_all", False) is True
    if not old:
        return "Error: old_text is empty; give the exact text to replace."
    text = _read_text(workspace, relative)
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


def _walk(workspace: Workspace, relative: str) -> Iterator[Path]:
    """The regular files under ``relative``, symlinks neither followed nor listed."""
    base = workspace.path(relative)
    if base.is_file():
        yield base
        return
    if not base.is_dir():
        raise FileNotFoundError(relative)
    for directory, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(directory) / name
            if not path.is_symlink():
                yield path


@_errors
def list_files(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    pattern = _text_arg(arguments, "pattern", "*")
    relative = _text_arg(arguments, "path", ".")
    rows: list[str] = []
    total = 0
    for path in _walk(workspace, relative):
        name = workspace.relative(path)
        if not (fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(path.name, pattern)):
            continue
        total += 1
        if len(rows) < MAX_LISTED:
            rows.append(f"{name}\t{path.stat().st_size} bytes")
    if not rows:
        return f"No files match '{pattern}' under '{relative}'."
    if total > len(rows):
        rows.append(f"[… {total - len(rows)} more; narrow the pattern or the path]")
    return "\n".join(rows)


@_errors
def search_files(arguments: dict[str, Any], ctx: ToolContext) -> str:
    workspace = _workspace(ctx)
    source = _text_arg(arguments, "pattern")
    relative = _text_arg(arguments, "path", ".")
    include = _text_arg(arguments, "glob", "*")
    try:
        regex = re.compile(source)
    except re.error as exc:
        return f"Error: '{source}' is not a valid regular expression ({exc})."
    rows: list[str] = []
    matches = 0
    for path in _walk(workspace, relative):
        name = workspace.relative(path)
        if not (fnmatch.fnmatch(name, include) or fnmatch.fnmatch(path.name, include)):
            continue
        text = _read_text(workspace, name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                matches += 1
                if len(rows) < MAX_MATCHES:
                    rows.append(f"{name}:{number}: {_clip_line(line)}")
    if not rows:
        return f"No line matches /{source}/ under '{relative}'."
    if matches > len(rows):
        rows.append(f"[… {matches - len(rows)} more matches; narrow the pattern or the path]")
    return "\n".join(rows)


# --- the toolset ----------------------------------------------------------------------------------


def _path_schema(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def file_tools(*, approval: str = "never") -> list[Tool]:
    """The ``files`` toolset. Its paths cannot leave the workspace, so no call is *dangerous*;
    with the ``always`` approval policy, the calls that change files ask first."""
    path = _path_schema("A path relative to the workspace, e.g. 'src/app.py'.")
    ask = (lambda arguments: "it changes a file") if approval == "always" else None
    tools = [
        Tool(
            name="read_file",
            description=(
                "Read a text file of the workspace, with line numbers. Long files come in pages: "
                "use offset (first line, from 1) and limit (lines)."
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
            handler=read_file,
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
                    "pattern": {"type": "string", "description": "A Python regular expression."},
                    "path": _path_schema("Where to search; default the whole workspace."),
                    "glob": {"type": "string", "description": "Only files matching this glob."},
                },
                "required": ["pattern"],
            },
            handler=search_files,
            max_result_chars=MAX_RESULT_CHARS,
        ),
    ]
    return [dataclasses.replace(tool, toolset="files") for tool in tools]
