"""Which images a ``code`` call left in its workspace, named on its ending
(``ToolFinished.images``), so a view can show them as the call's own outputs (the ``image``
outputs of a ``code_interpreter_call``).

The run's file announcement (``workspace_changes.py``) says what the whole run made, once it
has ended; a call's item closes when the call does, so what that call made is looked up then,
with the same bounded walk (``workspace_changes.snapshot``): the files modified since the call
began and changed since the run's last look (an earlier call's end), by the same rule as
``workspace_changes.changes``. The executor runs a ``code`` call alone (it writes, so it is
not concurrent-safe): nothing else wrote while it ran. The run goes on while the look is made,
so the next code call may be writing then: what changed after the call ended is left to that
call's look. A file is an image when its name and its first bytes both say PNG, JPEG, GIF or
WebP.

A conversation's workspace outlives the run, and its container serves the images: they are
named by path. A run of no conversation works in a temporary workspace, removed when it ends:
nothing will serve its images later, so those small enough travel in the event, in base64.

The call's ending is held back while the workspace is looked at, and every event after it
with it, so the events keep their order; the run itself goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import posixpath
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from hermes_core.agent import AgentRequest
from hermes_core.events import AgentEvent, CallImage, ToolFinished, ToolStarted
from hermes_core.tools.workspace import OutsideWorkspace, Workspace
from server.files.workspace_changes import Snapshot, WorkspaceWatch, snapshot
from server.runs.manager import Runnable

WATCHED_TOOLS = frozenset({"code"})
"""The tools whose calls' images are looked for (the hosted ``code_interpreter``'s)."""
MAX_IMAGES = 20
"""Images one call names at most (the container's listing has them all)."""
MAX_EXAMINED = 4 * MAX_IMAGES
"""Files named as images whose first bytes are read at most, per call."""
MAX_IMAGE_BYTES = 64 * 2**20
"""Larger files are not taken for a call's image (no chart is that large)."""
MAX_INLINE_BYTES = 2**20
"""An image carried in base64 is this large at most (a larger one is left out)..."""
MAX_INLINE_TOTAL = 4 * 2**20
"""...and so are all of one call's together."""
CLOCK_SLACK_NS = 20_000_000
"""Files are stamped from the kernel's coarse clock, up to a tick behind ``time.time_ns()``:
a file written just after a call began may carry a time a little before it."""
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def image_type(head: bytes) -> str | None:
    """The media type a file's first 12 bytes say (PNG, JPEG, GIF or WebP), or None."""
    for signature, media_type in _SIGNATURES:
        if head.startswith(signature):
            return media_type
    return "image/webp" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else None


def images_since(
    root: Path, since_ns: int, previous: Snapshot | None = None, *, inline: bool = False
) -> list[CallImage]:
    """The images under ``root`` modified at or after ``since_ns`` (wall clock), and changed
    since ``previous`` (the workspace as an earlier look saw it), oldest first; with their
    bytes when ``inline`` (those too large left out). A file that cannot be read is left out."""
    return images_in(root, snapshot(root), since_ns, previous, inline=inline)


def images_in(
    root: Path, now: Snapshot, since_ns: int, previous: Snapshot | None, *, inline: bool
) -> list[CallImage]:
    """:func:`images_since`, of the snapshot ``now`` of ``root``."""
    earliest = since_ns - CLOCK_SLACK_NS
    made = sorted(
        (mtime, path)
        for path, (size, mtime) in now.items()
        if mtime >= earliest
        # workspace_changes.changes's rule (without its cap on what an answer announces)
        and (previous is None or previous.get(path) != (size, mtime))
        and 0 < size <= (MAX_INLINE_BYTES if inline else MAX_IMAGE_BYTES)
        and posixpath.splitext(path)[1].lower() in IMAGE_SUFFIXES
    )
    workspace = Workspace(root)
    found: list[CallImage] = []
    room = MAX_INLINE_TOTAL
    for _, path in made[:MAX_EXAMINED]:
        image = _read_image(workspace, path, inline=inline, room=room)
        if image is not None:
            found.append(image)
            room -= len(image.data or "") * 3 // 4
            if len(found) == MAX_IMAGES:
                break
    return found


def _read_image(workspace: Workspace, path: str, *, inline: bool, room: int) -> CallImage | None:
    """``path`` as an image (with its base64 when ``inline`` and it fits ``room``), or None:
    not an image, too large, or unreadable."""
    try:
        # Never through a link leading out, even one put in place of a folder of the path
        # after it was checked (the run's next code call may be running as this looks: the
        # open file's own path is checked), nor waiting on a FIFO; a regular file only.
        descriptor = workspace.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OutsideWorkspace, OSError):
        return None
    try:
        media_type = image_type(os.pread(descriptor, 12, 0))
        if media_type is None:
            return None
        if not inline:
            return CallImage(path=path, media_type=media_type)
        limit = min(MAX_INLINE_BYTES, room)
        data = os.pread(descriptor, limit + 1, 0)
        if len(data) > limit:  # grown since, or more than is left for this call
            return None
        return CallImage(path=path, media_type=media_type, data=base64.b64encode(data).decode())
    except OSError:
        return None
    finally:
        os.close(descriptor)


class CallImagesWatch(WorkspaceWatch):
    """A :class:`WorkspaceWatch` (the files its run made, on the run's ending) that also names,
    on the ending of each of the run's ``code`` calls, the images the call made.

    ``conversation`` None: the run's workspace is temporary, removed when it ends; there are
    no files to announce, and the images travel inlined."""

    def __init__(self, inner: Runnable, root: Path, conversation: str | None) -> None:
        super().__init__(inner, root, conversation or "")
        self.lasting = conversation is not None

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        relay = _Relay(self.root, deliver, inline=not self.lasting)
        try:
            if self.lasting:
                await super().execute(request, relay.take)
            else:
                await self.inner.execute(request, relay.take)
            await relay.settled()
        finally:
            relay.release()  # cancelled while looking: what is held still goes out, as it is


class _Relay:
    """Passes events on, in order; a watched call's ending (and whatever follows it) waits
    for the look at the workspace."""

    def __init__(
        self, root: Path, deliver: Callable[[AgentEvent], object], *, inline: bool
    ) -> None:
        self._root = root
        self._deliver = deliver
        self._inline = inline
        self._began: dict[str, int] = {}
        """Watched calls under way: call id → when it began (``time.time_ns()``)."""
        self._ended: dict[str, int] = {}
        """Watched calls ended, not looked at yet: call id → when it ended."""
        self._seen: Snapshot | None = None
        """The workspace as the last look saw it (None: no look yet)."""
        self._held: deque[AgentEvent] = deque()
        self._pump: asyncio.Task[None] | None = None

    def take(self, event: AgentEvent) -> None:
        if isinstance(event, ToolStarted) and event.name in WATCHED_TOOLS:
            self._began[event.call_id] = time.time_ns()  # before the call can write anything
        watched = isinstance(event, ToolFinished) and event.call_id in self._began
        if isinstance(event, ToolFinished) and watched:
            self._ended[event.call_id] = time.time_ns()  # what changes later is not the call's
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
                    ended = self._ended.pop(event.call_id)
                    images, self._seen = await asyncio.to_thread(
                        _look, self._root, began, ended, self._seen, self._inline
                    )
                    if images:
                        event = dataclasses.replace(event, images=images)
            if self._held:  # not released meanwhile
                self._held.popleft()
                self._deliver(event)
        self._pump = None


def _look(
    root: Path, since_ns: int, until_ns: int, previous: Snapshot | None, inline: bool
) -> tuple[list[CallImage], Snapshot]:
    """The images a call that ran from ``since_ns`` to ``until_ns`` made, and the workspace as
    seen now; none when the workspace cannot be looked at (the call's logs still show)."""
    try:
        # A file changed after the call ended is a later call's, running as this looks: not
        # this call's image, and not seen yet, so that the later call's own look finds it.
        now = {path: seen for path, seen in snapshot(root).items() if seen[1] <= until_ns}
        return images_in(root, now, since_ns, previous, inline=inline), now
    except OSError:
        return [], previous or {}
