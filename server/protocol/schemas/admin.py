"""The shapes of the admin routes (``/v1/admin/…``, admin keys only; docs/retention.md)."""

from __future__ import annotations

from typing import Literal

from server.protocol.schemas.common import Shape


class RetentionSwept(Shape):
    """``POST /v1/admin/retention/sweep``: what one sweep deleted."""

    object: Literal["hermes.retention.sweep"]
    deleted: dict[str, int]
    """Rows deleted by table (``sessions``, ``messages``, ``todos``, ``approvals``, ``runs``,
    ``api_runs``, ``webhook_deliveries``, ``files``), and ``workspaces``: directories
    removed. A kind with nothing past its retention may be left out."""


class EndUserErased(Shape):
    """``DELETE /v1/admin/end_users/{end_user}``: what the erasure deleted."""

    object: Literal["hermes.end_user.erased"]
    key: str
    """The principal of the key the end user was behind."""
    end_user: str
    deleted: dict[str, int]
    """Rows deleted by table (``sessions``, ``messages``, ``todos``, ``session_locks``,
    ``memory``, ``approvals``, ``skills``, ``skill_versions``, ``files``, ``runs``,
    ``api_runs``, ``webhook_deliveries``, ``responses``, ``conversations``,
    ``usage_daily``); ``workspaces``: workspace directories removed; ``file_bytes``:
    uploaded files' bytes removed from disk."""
