"""Who a workspace's commands run as: a user of their own, one per workspace.

When the server runs as root, each workspace's commands run as an unprivileged user id of
their own (:func:`sandbox_uid`), never shared with another workspace nor with any real user
of the machine. Process limits then belong to that workspace alone: a fork bomb in one
conversation fills its own user's process count (``RLIMIT_NPROC`` is counted per user), not
everyone's; and a command can neither signal nor trace another workspace's processes.

The id is derived from the workspace's path, so every replica and every restart agrees on it
without a table; the range is far above any real account (and above the 65536-id blocks that
``/etc/subuid`` usually hands out from 100000), with 10**8 ids to spread over.

Everything in a workspace belongs to its user (a command must be able to change a file a file
tool wrote): :func:`give_to_sandbox` for what the server creates there, and :func:`adopt`
once for a workspace made before ids were per workspace (they were all ``nobody``'s).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

UID_BASE = 2_000_000_000
UID_SPAN = 100_000_000
NOBODY = 65534
"""What a command runs as when the server is not root (it cannot pick a user then)."""


def per_workspace_users() -> bool:
    """Commands run as a user per workspace (only root can switch to one)."""
    return os.geteuid() == 0


def sandbox_uid(workspace: Path) -> int:
    """The user (and group) id of ``workspace``'s commands: stable, and distinct per workspace
    with overwhelming likelihood (a clash would only share a process count)."""
    if not per_workspace_users():
        return os.geteuid()
    digest = hashlib.sha256(os.fsencode(os.path.realpath(workspace))).digest()
    return UID_BASE + int.from_bytes(digest[:8], "big") % UID_SPAN


def give_to_sandbox(target: Path | int, workspace: Path) -> None:
    """Make ``target`` (a path, or an open file) belong to ``workspace``'s user, when the
    server is root (otherwise the server's own user runs the commands and owns it already)."""
    if not per_workspace_users():
        return
    uid = sandbox_uid(workspace)
    if isinstance(target, int):
        os.fchown(target, uid, uid)
    else:
        os.chown(target, uid, uid, follow_symlinks=False)


def adopt(workspace: Path) -> None:
    """Give everything in ``workspace`` to its user, if its root is not theirs yet (a workspace
    from before per-workspace users, or moved). Symlinks are changed, never followed."""
    if not per_workspace_users():
        return
    uid = sandbox_uid(workspace)
    if os.lstat(workspace).st_uid == uid:
        return
    for directory, subdirectories, names in os.walk(workspace, followlinks=False):
        for name in (*subdirectories, *names):
            os.chown(os.path.join(directory, name), uid, uid, follow_symlinks=False)
    os.chown(workspace, uid, uid, follow_symlinks=False)  # last: it marks the walk as done
