"""Which files a run created or changed in its conversation's workspace.

A snapshot (path → size, mtime) is taken before the run and again once it has ended; the
difference travels to the views as ``RunFinished.files``, so every surface announces the same
files from the same facts (and a replay from the event log announces them again).

Both walks are bounded (a deadline, a number of files, the usual skipped directories): a
workspace may hold millions of files, and an answer is not held up for long. A walk cut short
announces only what it saw; files it did not reach are not announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from hermes_core.agent import AgentRequest
from hermes_core.events import AgentEvent, InterruptSource, RunFinished, WorkspaceFile
from hermes_core.tools.file_scan import SKIPPED_DIRS, Budget, ScanStopped, regular_files
from server.runs.manager import Runnable

SNAPSHOT_SECONDS = 2.0
"""How long one snapshot may walk."""
SNAPSHOT_MAX_FILES = 20_000
"""Files one snapshot records at most."""
MAX_ANNOUNCED = 50
"""Files one answer announces at most (the workspace's own listing has them all)."""

NOT_SHOWN = SKIPPED_DIRS | {".cache"}
"""Directories whose files no answer announces and no container lists: the usual caches, and
the one tools keep in their home's ``.cache``. The workspace is the sandbox's HOME, so the
first chart matplotlib draws there leaves fontconfig's cache files beside it, which are not
what the agent made."""

Snapshot = Mapping[str, tuple[int, int]]
"""Relative path → (size, mtime in ns)."""


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """The regular files under ``root`` whose names are text (bounded; empty when there is
    no workspace yet)."""
    found: dict[str, tuple[int, int]] = {}
    try:
        real = root.resolve(strict=True)
    except OSError:
        return found
    try:
        for path, info in regular_files(real, Budget(seconds=SNAPSHOT_SECONDS), skip=NOT_SHOWN):
            relative = path.relative_to(real).as_posix()
            if _is_text(relative):
                found[relative] = (info.st_size, info.st_mtime_ns)
            if len(found) >= SNAPSHOT_MAX_FILES:
                break
    except (ScanStopped, OSError):
        pass  # what was seen so far is the snapshot
    return found


def _is_text(path: str) -> bool:
    """Whether ``path`` is UTF-8 text: a command may name a file with other bytes (Python keeps
    them as lone surrogates), which no answer can carry as a name, a link or JSON (the answer
    failed with a 500). The workspace's listings still show it, and it can be downloaded."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def changes(before: Snapshot, after: Snapshot) -> list[WorkspaceFile]:
    """Files of ``after`` that ``before`` lacked or had with another size or mtime."""
    changed = [
        WorkspaceFile(path=path, bytes=size, created=path not in before)
        for path, (size, mtime) in after.items()
        if before.get(path) != (size, mtime)
    ]
    return changed[:MAX_ANNOUNCED]


def container_record(root: Path) -> Path:
    """Beside the workspace: the conversation's name and when its container began."""
    return root.parent / f"{root.name}.container.json"


def read_container_record(root: Path) -> dict[str, object]:
    try:
        data = json.loads(container_record(root).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(root: Path, conversation: str) -> None:
    """Write the record once (names are hashed in paths: this is where the name is kept)."""
    record = container_record(root)
    if record.exists():
        return
    record.parent.mkdir(parents=True, exist_ok=True)
    temporary = record.with_name(f".{record.name}.{secrets.token_hex(8)}.tmp")
    temporary.write_text(json.dumps({"name": conversation, "created_at": int(time.time())}))
    os.replace(temporary, record)


def _before(root: Path, conversation: str) -> dict[str, tuple[int, int]]:
    with contextlib.suppress(OSError):  # the name is a nicety; the snapshot is what matters
        _remember(root, conversation)
    return snapshot(root)


class WorkspaceWatch:
    """A :class:`Runnable` around another: its run's ending names the files it changed in
    ``root``. The ending is held back while the second snapshot is taken, then delivered."""

    def __init__(self, inner: Runnable, root: Path, conversation: str) -> None:
        self.inner = inner
        self.root = root
        self.conversation = conversation

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        before = await asyncio.to_thread(_before, self.root, self.conversation)
        ending: RunFinished | None = None

        def hold(event: AgentEvent) -> None:
            nonlocal ending
            if isinstance(event, RunFinished):
                ending = event
            else:
                deliver(event)

        try:
            await self.inner.execute(request, hold)
            if ending is not None:
                after = await asyncio.to_thread(snapshot, self.root)
                ending = dataclasses.replace(ending, files=changes(before, after))
        finally:
            if ending is not None:  # cancelled while looking: the ending still goes out
                deliver(ending)

    def interrupt(
        self, reason: str = "interrupted", *, source: InterruptSource = InterruptSource.OTHER
    ) -> None:
        self.inner.interrupt(reason, source=source)
