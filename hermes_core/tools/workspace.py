"""A conversation's working directory, and the only files its tools may touch.

Every path a tool is given is relative to the workspace. It is refused when it is absolute,
when it climbs out with ``..``, or when a symlink on the way leads outside; and a file is
opened without following a symlink at its last step and checked, once open, to be inside
(:func:`Workspace.open`), so a symlink swapped in after the check leads nowhere either. Only
regular files (and directories, asked for as such) are opened: a FIFO, socket or device is
refused without waiting on it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from hermes_core.tools.sandbox_identity import give_to_sandbox

MAX_PATH_CHARS = 1024


class OutsideWorkspace(ValueError):
    """A path that is not a file of the workspace; its message tells the model what to do."""


class NotRegularFile(OutsideWorkspace):
    """A path naming a FIFO, socket or device (or a directory where a file is wanted): opening
    one for real could block a worker thread for ever, so it is refused."""


class Workspace:
    """The directory ``root`` (created on first use), as seen by the tools."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure(self) -> Path:
        """The root, made if it does not exist yet; its real path."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True, exist_ok=True)
            _give_to_sandbox(self.root, self.root)
        return self.root.resolve()

    def makedirs(self, relative: str) -> Path:
        """The directory ``relative`` (and its parents) inside the workspace, made if missing."""
        path = self.path(relative)
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        for made in missing:
            _give_to_sandbox(made, self.root)
        return path

    def path(self, relative: str) -> Path:
        """The real path of ``relative`` inside the workspace (which it need not exist in)."""
        root = self.ensure()
        if not relative or len(relative) > MAX_PATH_CHARS or "\x00" in relative:
            raise OutsideWorkspace("Give a path relative to the workspace, e.g. 'notes/a.txt'.")
        pure = PurePosixPath(relative)
        if pure.is_absolute():
            raise OutsideWorkspace(
                f"'{relative}' is absolute: give a path relative to the workspace "
                f"(e.g. '{pure.name or 'file.txt'}'); the tools see nothing outside it."
            )
        if ".." in pure.parts:
            raise OutsideWorkspace(f"'{relative}' climbs out of the workspace with '..'.")
        try:
            resolved = (root / pure).resolve()
        except (RuntimeError, OSError) as exc:
            # A symlink loop: RuntimeError until Python 3.13, ELOOP after. Its message holds
            # the absolute path, which the model must not see.
            if isinstance(exc, OSError) and exc.errno != errno.ELOOP:
                raise
            raise OutsideWorkspace(f"'{relative}' leads into a loop of symlinks.") from None
        if not resolved.is_relative_to(root):
            raise OutsideWorkspace(f"'{relative}' leads outside the workspace (a symlink).")
        return resolved

    def relative(self, path: Path) -> str:
        """``path`` as the tools name it: relative to the workspace, with ``/``."""
        return path.relative_to(self.ensure()).as_posix() or "."

    def open(self, relative: str, flags: int, mode: int = 0o644) -> int:
        """A file descriptor for ``relative``, opened with ``flags`` and never through a
        symlink leading out (checked again on the open file). It must be a regular file, or a
        directory when ``flags`` hold ``O_DIRECTORY``; anything else is :class:`NotRegularFile`.
        The caller closes it."""
        path = self.path(relative)
        # O_NONBLOCK: opening a FIFO nobody writes to would otherwise wait for a writer, with
        # a worker thread the whole server shares. It is cleared again once the file is known
        # to be regular.
        try:
            descriptor = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader, or a socket
                raise _not_regular(relative, "a FIFO or socket") from exc
            raise
        try:
            real = Path(os.readlink(f"/proc/self/fd/{descriptor}"))
            if not real.is_relative_to(self.ensure()):
                raise OutsideWorkspace(f"'{relative}' leads outside the workspace.")
            _check_kind(relative, os.fstat(descriptor).st_mode, flags)
            if not flags & os.O_NONBLOCK:
                os.set_blocking(descriptor, True)
            if flags & os.O_CREAT:
                _give_to_sandbox(descriptor, self.root)
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor


def _check_kind(relative: str, mode: int, flags: int) -> None:
    if flags & os.O_DIRECTORY:
        if not stat.S_ISDIR(mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), relative)
        return
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), relative)
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise _not_regular(relative, kind)


def _not_regular(relative: str, kind: str) -> NotRegularFile:
    return NotRegularFile(
        f"'{relative}' is not a regular file ({kind}); the file tools read and write regular "
        "files only."
    )


def _give_to_sandbox(target: Path | int, root: Path) -> None:
    """Make ``target`` (a path, or an open file) belong to the user the workspace ``root``'s
    commands run as (see :mod:`~hermes_core.tools.sandbox_identity`)."""
    give_to_sandbox(target, root)
