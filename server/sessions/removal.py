"""Changing a conversation outside a turn: under its turn lock, as a turn would hold it.

``DELETE /v1/sessions/{name}`` and the conversations routes (deleting one, adding or deleting
its items) change a conversation's sessions while no run may: each takes the conversation's
turn lock (``session_locks``) for the change, refused while a run holds it, and gives it back
however the change ends. Deleting a conversation removes its sessions' rows and then its
workspace, under the lock, so no turn starting the name afresh has made files there yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from hermes_core.ids import token_hex
from hermes_core.persistence import Store
from hermes_core.persistence.retention import Counts
from server.errors import APIError
from server.files.removal import remove_workspace

LOCK_LEASE_SECONDS = 120.0
"""How long a change may hold the lock if this process dies holding it."""


@asynccontextmanager
async def turn_lock(store: Store, owner: str, name: str, *, busy: APIError) -> AsyncIterator[None]:
    """Hold ``owner``'s conversation ``name``'s turn lock; ``busy`` (a 409) when a run holds
    it. Released, and the release written, however the block ends."""
    holder = f"change_{token_hex(8)}"
    if not await store.sessions.lock(owner, name, holder, lease_seconds=LOCK_LEASE_SECONDS):
        raise busy
    try:
        yield
    finally:
        store.sessions.unlock(owner, name, holder)
        await store.db.writer.flush()


async def remove_conversation(
    store: Store, owner: str, name: str, workspace: Path | None
) -> tuple[Counts, bool]:
    """Delete ``owner``'s conversation ``name`` (every session, message, todo list and approval
    of it) and its ``workspace`` (None: it has none), with its turn lock held by the caller
    (:func:`turn_lock`). The rows deleted by table, and whether a workspace was removed."""
    counts = await store.retention.delete_conversation(owner, name)
    removed = workspace is not None and await asyncio.to_thread(remove_workspace, workspace)
    return counts, removed
