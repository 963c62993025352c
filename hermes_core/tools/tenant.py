"""Whom the tools of a run work for: the API key's principal, for what tenants share fairly.

The server names the tenant as a run starts (:func:`work_for`); the run's task, and every task
and thread it starts, inherit it. Shared pools that take tenants in turn (the page readers,
``web/page_readers.py``) read it with :func:`current_tenant`. Outside a run (library use,
tests) every caller is the one unnamed tenant.
"""

from __future__ import annotations

from contextvars import ContextVar

_TENANT: ContextVar[str] = ContextVar("hermes_tool_tenant", default="")


def work_for(tenant: str) -> None:
    """Tools run from here on, in this task and the tasks it starts, work for ``tenant``."""
    _TENANT.set(tenant)


def current_tenant() -> str:
    return _TENANT.get()
