"""How much of the disk a workspace, and a key's workspaces together, may take.

RLIMIT_FSIZE caps one file; it does not stop four files, or a hundred thousand small ones, or
two conversations of one key writing at once. So a workspace is *measured*: a bounded walk of
its directory (symlinks never followed, ``lstat`` only, allocated blocks counted so that a
sparse file is not a loophole, stopped at the file cap and after a time budget). A key's
workspaces sit in one directory (``<root>/<owner>/<conversation>``, see
``server/files/workspaces.py``): its total is the sum of its workspaces' usage, remembered per
workspace (:class:`UsageBook`) so that checking it does not walk every one each time.

The data volume itself keeps a reserve free (the database needs room to record runs): when
less is free, writes are refused whatever the quotas say.

:func:`assess` answers "may this workspace grow, and by how much"; the ``shell`` and ``code``
tools (``tools/commands.py``) use it before, and while, a command runs; the file tools and
uploads placed into a workspace use :func:`admit_write`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
MEASURE_SECONDS = 2.0
"""Time budget of one walk before a command or a write (a lower bound past it)."""
WATCH_SECONDS = 0.25
"""Time budget of one walk while a command runs (it is repeated)."""
SIBLING_MAX_AGE = 30.0
"""A key's other workspaces are re-measured when their last measure is older than this
(a workspace whose command is running is re-measured by its watcher far more often)."""
KEY_CHECK_SECONDS = 2.0
"""Time budget of walking a key's other workspaces whose measures are stale."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceQuota:
    """Limits on what workspaces may hold."""

    workspace_bytes: int = 1024 * MIB
    """Bytes one workspace (a conversation's) may take."""
    key_bytes: int = 4096 * MIB
    """Bytes all of one key's workspaces may take together."""
    max_files: int = 100_000
    """Files and directories one workspace may hold (inodes run out before bytes do)."""
    reserve_bytes: int = 1024 * MIB
    reserve_fraction: float = 0.05
    """The volume keeps the smaller of these free (a fraction of its size) for the server."""

    def reserve(self, volume_bytes: int) -> int:
        return min(self.reserve_bytes, int(volume_bytes * self.reserve_fraction))


@dataclass(frozen=True, slots=True)
class Usage:
    bytes: int
    """Allocated bytes (``st_blocks * 512``) of everything in it, directories included."""
    files: int
    """Entries found (files, directories, links)."""
    complete: bool = True
    """False when the walk stopped early (file cap or time budget): the figures are a lower
    bound."""


def measure(root: Path, *, max_files: int, budget_s: float = MEASURE_SECONDS) -> Usage:
    """What ``root`` holds, walked without following symlinks; stops after ``max_files + 1``
    entries or ``budget_s`` seconds. A missing directory holds nothing."""
    deadline = time.monotonic() + budget_s
    total = files = 0
    seen: set[tuple[int, int]] = set()
    pending = [root]
    while pending:
        directory = pending.pop()
        # Entries vanish while a command runs: whatever cannot be read counts as gone.
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                files += 1
                if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                    identity = (info.st_dev, info.st_ino)
                    if identity in seen:  # a hard link takes no more room
                        continue
                    seen.add(identity)
                total += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
                if files > max_files or time.monotonic() > deadline:
                    return Usage(total, files, complete=False)
    return Usage(total, files)


class UsageBook:
    """The last measure of each workspace, so that a key's total is a sum of remembered
    figures (re-measured when stale) rather than a walk of all its workspaces each time.
    Shared by the threads that measure."""

    def __init__(self, *, max_entries: int = 20_000) -> None:
        self._seen: dict[Path, tuple[Usage, float]] = {}
        self._lock = threading.Lock()
        self._max_entries = max_entries

    def measure(self, workspace: Path, *, max_files: int, budget_s: float) -> Usage:
        """A fresh measure of ``workspace``, remembered."""
        usage = measure(workspace, max_files=max_files, budget_s=budget_s)
        self.remember(workspace, usage)
        return usage

    def remember(self, workspace: Path, usage: Usage) -> None:
        with self._lock:
            if len(self._seen) >= self._max_entries and workspace not in self._seen:
                self._seen.clear()  # a bound, not a policy: figures are re-measured on demand
            self._seen[workspace] = (usage, time.monotonic())

    def key_total(self, workspace: Path, own: Usage, *, max_files: int) -> int:
        """Bytes of all the workspaces beside ``workspace`` (its key's), ``own`` for it."""
        total = own.bytes
        deadline = time.monotonic() + KEY_CHECK_SECONDS
        now = time.monotonic()
        present: set[Path] = set()
        for sibling in _siblings(workspace):
            present.add(sibling)
            with self._lock:
                known = self._seen.get(sibling)
            if known is not None and now - known[1] < SIBLING_MAX_AGE:
                total += known[0].bytes
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                total += known[0].bytes if known is not None else 0
                continue
            total += self.measure(sibling, max_files=max_files, budget_s=left).bytes
        self._forget_removed(workspace.parent, present | {workspace})
        return total

    def _forget_removed(self, key_dir: Path, present: set[Path]) -> None:
        with self._lock:
            gone = [p for p in self._seen if p.parent == key_dir and p not in present]
            for path in gone:
                del self._seen[path]


def _siblings(workspace: Path) -> Iterator[Path]:
    with contextlib.suppress(OSError), os.scandir(workspace.parent) as entries:
        for entry in entries:
            path = Path(entry.path)
            if path != workspace and entry.is_dir(follow_symlinks=False):
                yield path


USAGE = UsageBook()
"""The process's measures: one disk, one book."""


def _mb(size: int) -> str:
    return f"{size / MIB:.1f}".removesuffix(".0") + " MB"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a workspace may still take."""

    room: int
    """Bytes that may still be written (the least of the workspace's, the key's and the
    volume's room); zero or less when full."""
    usage: Usage
    problem: str | None
    """Why nothing more may be written, in words the model reads (no trailing period), or
    None while there is room."""

    @property
    def full(self) -> bool:
        return self.problem is not None


def assess(
    workspace: Path,
    quota: WorkspaceQuota,
    *,
    book: UsageBook = USAGE,
    budget_s: float = MEASURE_SECONDS,
    incoming: int = 0,
) -> Verdict:
    """May ``workspace`` take ``incoming`` more bytes (and one more file)? Blocks on the disk:
    call it in a worker thread."""
    usage = book.measure(workspace, max_files=quota.max_files, budget_s=budget_s)
    key_used = book.key_total(workspace, usage, max_files=quota.max_files)
    free, volume = _volume_free(workspace)
    reserve = quota.reserve(volume)
    room = min(
        quota.workspace_bytes - usage.bytes,
        quota.key_bytes - key_used,
        free - reserve,
    )
    return Verdict(room, usage, _problem(quota, usage, key_used, free, reserve, incoming))


def _problem(
    quota: WorkspaceQuota, usage: Usage, key_used: int, free: int, reserve: int, incoming: int
) -> str | None:
    if usage.files >= quota.max_files:
        many = "more than " if not usage.complete else ""
        return f"the workspace holds {many}{quota.max_files} files, the most it may"
    if usage.bytes + incoming > quota.workspace_bytes:
        return _over("the workspace", "its", quota.workspace_bytes, usage.bytes, incoming)
    if key_used + incoming > quota.key_bytes:
        return _over("this key's workspaces together", "their", quota.key_bytes, key_used, incoming)
    if free - incoming < reserve:
        return f"the server's disk is nearly full ({_mb(max(free, 0))} free)"
    return None


def _over(what: str, its: str, limit: int, used: int, incoming: int) -> str:
    if incoming and used <= limit:
        return f"{what} would exceed {its} quota of {_mb(limit)} ({_mb(used)} used)"
    verb = "exceeded" if used > limit else "reached"
    return f"{what} {verb} {its} quota of {_mb(limit)} ({_mb(used)} used)"


def _volume_free(path: Path) -> tuple[int, int]:
    """(free bytes, size) of the volume ``path`` (or its nearest existing parent) is on."""
    for candidate in (path, *path.parents):
        try:
            disk = shutil.disk_usage(candidate)
        except OSError:
            continue
        return disk.free, disk.total
    return 0, 0


# --- writes by the server's own tools ---------------------------------------------------------


class QuotaExceeded(OSError):
    """A write that would take a workspace past a quota, refused before it was made."""

    def __init__(self, problem: str) -> None:
        super().__init__(errno.EDQUOT, f"{problem}; delete files to go on")


_IN_FORCE: ContextVar[WorkspaceQuota | None] = ContextVar("hermes_workspace_quota", default=None)


def admit_write(
    workspace: Path,
    incoming: int,
    *,
    replacing: Path | None = None,
    quota: WorkspaceQuota | None = None,
) -> None:
    """Raise :class:`QuotaExceeded` unless ``workspace`` may take ``incoming`` more bytes
    (less the file ``replacing``, which the write replaces) under ``quota`` (by default the
    one in force: see :func:`bound_to`; none in force, the defaults). Blocks on the disk."""
    limits = quota or _IN_FORCE.get() or WorkspaceQuota()
    if replacing is not None:
        with contextlib.suppress(OSError):
            info = replacing.lstat()
            if stat.S_ISREG(info.st_mode):
                incoming = max(0, incoming - info.st_blocks * 512)
    verdict = assess(workspace, limits, incoming=incoming)
    if verdict.problem is not None:
        raise QuotaExceeded(verdict.problem)


@contextlib.contextmanager
def quota_in_force(quota: WorkspaceQuota) -> Iterator[None]:
    """``quota`` in force for the :func:`admit_write` calls made inside (threads started with
    ``asyncio.to_thread`` inherit it)."""
    token = _IN_FORCE.set(quota)
    try:
        yield
    finally:
        _IN_FORCE.reset(token)


def bound_to(
    handler: Callable[[dict[str, Any], Any], Any], quota: WorkspaceQuota
) -> Callable[[dict[str, Any], Any], Any]:
    """``handler`` (a plain tool handler) with ``quota`` in force while it runs, for the
    :func:`admit_write` calls it makes."""

    def bound(arguments: dict[str, Any], ctx: Any) -> Any:
        with quota_in_force(quota):
            return handler(arguments, ctx)

    bound.__name__ = getattr(handler, "__name__", "handler")
    return bound
