"""Which images a ``code`` call left in its conversation's workspace, named on its ending
(``ToolFinished.images``), so a view can show them as the call's own outputs (the ``image``
outputs of a ``code_interpreter_call``).

The run's file announcement (``workspace_changes.py``) says what the whole run made, once it
has ended; a call's item closes when the call does, so what that call made is looked up then,
with the same bounded walk (``workspace_changes.snapshot``): the files modified since the call
began and changed since the run's last look (an earlier call's end), by the same rule as
``workspace_changes.changes``. The executor runs a ``code`` call alone (it writes, so it is
not concurrent-safe): nothing else wrote meanwhile. A file is an image when its name and its
first bytes both say PNG, JPEG, GIF or WebP.

The call's ending is held back while the workspace is looked at, and every event after it
with it, so the events keep their order; the run itself goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import posixpath
import stat
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from hermes_core.agent import AgentRequest
from hermes_core.events import AgentEvent, ToolFinished, ToolStarted
from hermes_core.tools.workspace import OutsideWorkspace, Workspace
from server.files.workspace_changes import Snapshot, WorkspaceWatch, snapshot

WATCHED_TOOLS = frozenset({"code"})
"""The tools whose calls' images are looked for (the hosted ``code_interpreter``'s)."""
MAX_IMAGES = 20
"""Images one call names at most (the container's listing has them all)."""
MAX_EXAMINED = 4 * MAX_IMAGES
"""Files named as images whose first bytes are read at most, per call."""
MAX_IMAGE_BYTES = 64 * 2**20
"""Larger files are not taken for a call's image (no chart is that large)."""
CLOCK_SLACK_NS = 20_000_000
"""Files are stamped from the kernel's coarse clock, up to a tick behind ``time.time_ns()``:
a file written just after a call began may carry a time a little before it."""
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")


def is_image_header(head: bytes) -> bool:
    """Whether a file's first 12 bytes are those of a PNG, JPEG, GIF or WebP image."""
    return head.startswith(_SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def images_since(root: Path, since_ns: int, previous: Snapshot | None = None) -> list[str]:
    """The images under ``root`` modified at or after ``since_ns`` (wall clock), and changed
    since ``previous`` (the workspace as an earlier look saw it), oldest first, as paths
    relative to it; a file that cannot be read is left out."""
    return images_in(root, snapshot(root), since_ns, previous)


def images_in(root: Path, now: Snapshot, since_ns: int, previous: Snapshot | None) -> list[str]:
    """:func:`images_since`, of the snapshot ``now`` of ``root``."""
    earliest = since_ns - CLOCK_SLACK_NS
    made = sorted(
        (mtime, path)
        for path, (size, mtime) in now.items()
        if mtime >= earliest
        # workspace_changes.changes's rule (without its cap on what an answer announces)
        and (previous is None or previous.get(path) != (size, mtime))
        and 0 < size <= MAX_IMAGE_BYTES
        and posixpath.splitext(path)[1].lower() in IMAGE_SUFFIXES
    )
    workspace = Workspace(root)
    return [path for _, path in made[:MAX_EXAMINED] if _looks_like_an_image(workspace, path)][
        :MAX_IMAGES
    ]


def _looks_like_an_image(workspace: Workspace, path: str) -> bool:
    try:
        real = workspace.path(path)  # no link leading out of the workspace
        # Never follow a link put in its place since, nor wait on a FIFO.
        descriptor = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (OutsideWorkspace, OSError):
        return False
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False
        return is_image_header(os.read(descriptor, 12))
    except OSError:
        return False
    finally:
        os.close(descriptor)


class CallImagesWatch(WorkspaceWatch):
    """A :class:`WorkspaceWatch` (the files its run made, on the run's ending) that also names,
    on the ending of each of the run's ``code`` calls, the images the call made."""

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        relay = _Relay(self.root, deliver)
        try:
            await super().execute(request, relay.take)
            await relay.settled()
        finally:
            relay.release()  # cancelled while looking: what is held still goes out, as it is


class _Relay:
    """Passes events on, in order; a watched call's ending (and whatever follows it) waits
    for the look at the workspace."""

    def __init__(self, root: Path, deliver: Callable[[AgentEvent], object]) -> None:
        self._root = root
        self._deliver = deliver
        self._began: dict[str, int] = {}
        """Watched calls under way: call id → when it began (``time.time_ns()``)."""
        self._seen: Snapshot | None = None
        """The workspace as the last look saw it (None: no look yet)."""
        self._held: deque[AgentEvent] = deque()
        self._pump: asyncio.Task[None] | None = None

    def take(self, event: AgentEvent) -> None:
        if isinstance(event, ToolStarted) and event.name in WATCHED_TOOLS:
            self._began[event.call_id] = time.time_ns()  # before the call can write anything
        watched = isinstance(event, ToolFinished) and event.call_id in self._began
        if not (watched or self._held):
            self._deliver(event)
            return
        self._held.append(event)
        if self._pump is None:
            self._pump = asyncio.create_task(self._pass_on())

    async def settled(self) -> None:
        """Once everything held has gone out."""
        if self._pump is not None:
            await asyncio.shield(self._pump)

    def release(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            self._pump = None
        while self._held:
            self._deliver(self._held.popleft())

    async def _pass_on(self) -> None:
        while self._held:
            event = self._held[0]
            if isinstance(event, ToolFinished):
                began = self._began.pop(event.call_id, None)
                if began is not None:
                    images, self._seen = await asyncio.to_thread(
                        _look, self._root, began, self._seen
                    )
                    if images:
                        event = dataclasses.replace(event, images=images)
            if self._held:  # not released meanwhile
                self._held.popleft()
                self._deliver(event)
        self._pump = None


def _look(root: Path, since_ns: int, previous: Snapshot | None) -> tuple[list[str], Snapshot]:
    """The images a call that began at ``since_ns`` made, and the workspace as seen now; none
    when the workspace cannot be looked at (the call's logs still show)."""
    try:
        now = snapshot(root)
        return images_in(root, now, since_ns, previous), now
    except OSError:
        return [], previous or {}
