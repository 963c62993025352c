"""Erasing an end user (a privacy request): their live runs stopped on whichever replica runs
them, then every row of theirs deleted (``persistence/erasure.py`` says which) and their
files removed from disk — their workspaces (on the shared volume), their uploads' bytes, and
this replica's cached folders of their skills (every other replica forgets its own within a
sweep interval, ``sweeper.py``).

The log line says which key and how many rows of each kind, never what they held; the end
user is named by a digest of their id, which an operator can match to a request without the
log keeping the id itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from hermes_core.persistence import FileRecord, Store
from hermes_core.persistence.retention import Counts
from server.files.removal import remove_files, remove_tree
from server.files.workspaces import conversation_workspace
from server.retention.sweeper import Sweeper

log = logging.getLogger("hermes.retention")

STOP_WAIT_SECONDS = 30.0
"""How long the end user's stopped runs may take to end before the erasure gives up (409)."""
STOP_AGAIN_SECONDS = 0.5


class EndUserBusy(Exception):
    """Some of the end user's runs were still going when the wait ran out."""

    def __init__(self, runs: int) -> None:
        super().__init__(f"{runs} run(s) of the end user did not stop in time")
        self.runs = runs


async def erase_end_user(
    store: Store,
    key: str,
    end_user: str,
    *,
    stop: Callable[[str], Awaitable[object]],
    workspaces_dir: Path | None,
    file_path: Callable[[FileRecord], Path] | None,
    sweeper: Sweeper | None,
    forget: Callable[[list[str]], Awaitable[None]] | None = None,
    wait_seconds: float = STOP_WAIT_SECONDS,
) -> Counts:
    """Stop ``end_user``'s runs behind ``key`` (``stop`` a run by id, on any replica), then
    delete all their rows and files; how many of each went (``workspaces``: directories,
    ``file_bytes``: uploads' files on disk); ``forget`` drops the erased runs' events held
    by the replicas. Raises :class:`EndUserBusy` when their runs
    have not ended within ``wait_seconds``."""
    live = await store.erasure.live_runs(key, end_user)
    deadline = time.monotonic() + wait_seconds
    stopped = float("-inf")
    while live:
        # Asked again while it lasts: a run in its first moments holds its conversation's
        # lock before any replica can find it to stop it.
        if time.monotonic() - stopped >= STOP_AGAIN_SECONDS:
            stopped = time.monotonic()
            for run_id in sorted(live):
                await stop(run_id)
        if time.monotonic() >= deadline:
            raise EndUserBusy(len(live))
        await asyncio.sleep(0.1)
        live = await store.erasure.live_runs(key, end_user)
    erased = await store.erasure.erase(key, end_user)
    if forget is not None:  # what replicas hold of their runs (events, in memory and Redis)
        await forget(erased.run_ids)
    counts = dict(erased.counts)
    counts["workspaces"] = 0
    if workspaces_dir is not None:
        # One owner's conversations sit in one directory (server/files/workspaces.py).
        theirs = conversation_workspace(workspaces_dir, f"{key}/{end_user}", "").parent
        counts["workspaces"] = await asyncio.to_thread(_workspaces_in, theirs)
    counts["file_bytes"] = 0
    if file_path is not None and erased.files:
        paths = [file_path(record) for record in erased.files]
        counts["file_bytes"] = await asyncio.to_thread(remove_files, paths)
    if sweeper is not None and erased.skill_ids:
        await sweeper.forget_cached_skills(erased.skill_ids)
    deleted = ", ".join(f"{count} {name}" for name, count in counts.items() if count)
    log.warning(
        "end user erased: key %s, end user #%s: deleted %s",
        key,
        end_user_digest(end_user),
        deleted or "nothing",
    )
    return counts


def end_user_digest(end_user: str) -> str:
    """What the log names an erased end user by (the id itself is not kept there)."""
    return hashlib.sha256(end_user.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _workspaces_in(directory: Path) -> int:
    """Remove the owner's directory of workspaces; how many workspaces it held."""
    try:
        count = sum(1 for entry in directory.iterdir() if entry.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return 0
    remove_tree(directory)
    return count
