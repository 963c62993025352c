"""Removing workspaces, uploaded files' bytes and skills' cached folders from disk: what
deleting a conversation or container, retention, erasure and a run's temporary workspace
remove. Blocking: callers run these in a thread (``asyncio.to_thread``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path

from server.files.uploads import uploads_record
from server.files.workspace_changes import container_record


def remove_tree(root: Path) -> bool:
    """Remove the directory ``root`` and everything in it; whether there was one.

    What an agent's commands left there may be read-only (``chmod -w``, a tool's cache):
    such an entry's directory is made writable and the removal tried again. A link is
    removed, never followed, and ``root`` itself being a link removes only the link."""
    try:
        info = root.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        root.unlink(missing_ok=True)
        return True
    try:
        shutil.rmtree(root)
    except OSError:  # something in it is read-only: open everything up, then again
        _open_up(root)
        shutil.rmtree(root)
    return True


def remove_workspace(root: Path) -> bool:
    """Remove a conversation's workspace and the records beside it: the one that names it as
    a container (``/v1/containers``), and the one of the uploads placed in it (their ids and
    names: left behind, they outlived every copy and were never removed); whether there was
    a workspace."""
    removed = remove_tree(root)
    container_record(root).unlink(missing_ok=True)
    uploads_record(root).unlink(missing_ok=True)
    return removed


def _open_up(directory: Path | str) -> None:
    """Make ``directory`` and every directory under it readable and writable (links are
    not followed)."""
    with contextlib.suppress(OSError):
        os.chmod(directory, stat.S_IRWXU)
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _open_up(entry.path)


def remove_files(paths: list[Path]) -> int:
    """Remove these files (missing ones are no error); how many were there."""
    removed = 0
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
    return removed
