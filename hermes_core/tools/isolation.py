"""What keeps one sandbox from starving the others on this machine, found once per process.

The pieces (see ``docs/isolation.md``): a user per workspace (root only), cgroups per sandbox
and for all sandboxes together (where the machine lets the server write them), the seccomp
filter against new user namespaces, and rlimits everywhere. :func:`isolation` reports what is
in force here, for ``/ready``, ``check-config`` and the start-up log; what is missing is said,
never silently skipped.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from hermes_core.tools import seccomp
from hermes_core.tools.cgroups import CgroupHost, CgroupLimits, find_cgroup_host
from hermes_core.tools.sandbox_identity import per_workspace_users

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Isolation:
    """What isolates sandboxes from each other on this machine."""

    cgroups: str | None
    """``cgroup v2 (memory, pids, cpu)`` or ``cgroup v1 (…)``; None when unavailable."""
    cgroups_missing: str | None
    """Why there are no cgroups (then memory and processes are bounded per process only)."""
    user_per_workspace: bool
    """Each workspace's commands run as a user of their own (the server is root)."""
    seccomp: bool
    """New user namespaces are refused inside the sandbox."""

    def summary(self) -> str:
        parts = [
            self.cgroups or f"no cgroups ({self.cgroups_missing}): rlimits only",
            "a user per workspace" if self.user_per_workspace else "one user for all sandboxes",
            "no user namespaces inside" if self.seccomp else "user namespaces not filtered",
        ]
        return "; ".join(parts)


def default_total() -> CgroupLimits:
    """All sandboxes together, by default: half the memory, and the CPU less half a core for
    the server itself (on a 2-core machine: 1.5 cores)."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cores = os.cpu_count() or 1
    return CgroupLimits(memory_bytes=memory // 2, max_processes=4096, cpus=max(1.0, cores - 0.5))


_lock = threading.Lock()
_host: list[CgroupHost | str] = []
_total: list[CgroupLimits] = []


def configure_total(total: CgroupLimits | None) -> None:
    """Set (or, with None, reset to the default) the limits of all sandboxes together; applied
    at once where cgroups are set up, else at their first use."""
    with _lock:
        _total[:] = [total or default_total()]
        if _host and isinstance(_host[0], CgroupHost):
            _apply_total(_host[0], _total[0])


def _apply_total(host: CgroupHost, total: CgroupLimits) -> None:
    try:
        host.set_total(total)
    except OSError as exc:
        log.warning("the sandboxes' total limits could not be set: %s", exc.strerror or exc)


def cgroup_host() -> CgroupHost | None:
    """The sandboxes' cgroup parent, set up on first use; None where cgroups are unavailable."""
    with _lock:
        if not _host:
            found = find_cgroup_host()
            _host.append(found)
            if isinstance(found, CgroupHost):
                _apply_total(found, _total[0] if _total else default_total())
                log.info("sandboxes: %s", found.describe())
            else:
                log.warning(
                    "sandboxes: no cgroups (%s); memory and processes are bounded "
                    "per process only (rlimits)",
                    found,
                )
        found = _host[0]
    return found if isinstance(found, CgroupHost) else None


def isolation() -> Isolation:
    host = cgroup_host()
    return Isolation(
        cgroups=host.describe() if host is not None else None,
        cgroups_missing=None if host is not None else str(_host[0]),
        user_per_workspace=per_workspace_users(),
        seccomp=seccomp.supported(),
    )
