"""Control groups for sandboxed commands: memory, processes and CPU per sandbox, and a total
for all of them, so one tenant's command can never starve another's (or the server).

Layout, under the cgroup the server itself runs in::

    <server's cgroup>/hermes-sandboxes/          the total for every sandbox (memory, pids, cpu)
    <server's cgroup>/hermes-sandboxes/sb-<id>/  one command's sandbox (its own limits)

Both cgroup versions are supported, because machines still come with either:

- **v2** (the unified hierarchy at ``/sys/fs/cgroup``): one tree. A cgroup that hands
  controllers to its children may hold no process itself, so when the server's own cgroup
  holds processes they move to a ``hermes-server`` leaf beside ``hermes-sandboxes`` first
  (what a container's init does to delegate, too).
- **v1** (a tree per controller): ``memory``, ``pids`` and ``cpu`` each get the same two levels.

A command joins its sandbox's cgroup before anything else runs (:attr:`SandboxCgroup.join`
is a prefix for its command line), so every process it starts is counted. Without cgroups
(no hierarchy mounted, or not writable: a non-root server without delegation) the sandbox
falls back to rlimits, and :func:`cgroup_host` says why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "hermes-sandboxes"
SERVER_LEAF = "hermes-server"
_CONTROLLERS = ("memory", "pids", "cpu")
_CPU_PERIOD_US = 100_000
_JOIN_FAILED = 125
"""Exit code of a command whose process could not join its cgroup (it never ran)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupLimits:
    memory_bytes: int
    """Memory of every process together (the sandbox's ``/tmp`` counts: it is RAM)."""
    max_processes: int
    cpus: float
    """CPU time per wall-clock second (1.0: one core)."""


class SandboxCgroup:
    """One command's cgroup (one directory per hierarchy)."""

    def __init__(self, directories: list[Path], *, version: int) -> None:
        self.directories = directories
        self.version = version

    @property
    def join(self) -> list[str]:
        """A command-line prefix that moves its own process into this cgroup, then runs the
        rest: ``[*join, *argv]``. Exits with 125 if it cannot join."""
        script = (
            'while [ "$1" != -- ]; do echo $$ > "$1" || exit ' + str(_JOIN_FAILED) + "; shift; "
            'done; shift; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "sh", *self._procs_files(), "--"]

    def _procs_files(self) -> list[str]:
        return [str(directory / "cgroup.procs") for directory in self.directories]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this sandbox for memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for directory in self.directories:
            try:
                text = (directory / name).read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                    return True
        return False

    def kill(self) -> None:
        """Kill every process still in the sandbox (one that left its process group too)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.directories[0] / "cgroup.kill").write_text("1")
                return
        for _ in range(20):  # v1 has no cgroup.kill: kill what is listed until nothing is
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def _pids(self) -> list[int]:
        found: set[int] = set()
        for procs in self._procs_files():
            with contextlib.suppress(OSError):
                found.update(int(p) for p in Path(procs).read_text().split())
        return sorted(found)

    def remove(self) -> None:
        """Remove the cgroup (after its processes are gone; killed first if some are not)."""
        for attempt in range(50):
            for directory in self.directories:
                with contextlib.suppress(FileNotFoundError, OSError):
                    directory.rmdir()
            if not any(d.exists() for d in self.directories):
                return
            # A process of the sandbox is still being torn down: give it a moment.
            if attempt == 10:
                self.kill()
            time.sleep(0.005)
        log.warning("a sandbox cgroup could not be removed: %s", self.directories[0].name)


class CgroupHost:
    """The sandboxes' parent cgroup(s) on this machine, and the factory of sandbox cgroups."""

    def __init__(self, parents: dict[str, Path], *, version: int) -> None:
        self.parents = parents
        """Controller → the ``hermes-sandboxes`` directory of its hierarchy (one for v2)."""
        self.version = version

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(_CONTROLLERS)})"

    def set_total(self, limits: CgroupLimits) -> None:
        """The limits of all sandboxes together."""
        for directory in set(self.parents.values()):
            _apply(directory, limits, version=self.version, controllers=self._at(directory))
        # Sandboxes give way to the server when the CPU is contended (the default weight is
        # 100 / 1024 shares): the server must keep answering while commands compute.
        cpu = self.parents.get("cpu")
        if cpu is not None:
            if self.version == 2:
                _write(cpu, "cpu.weight", "50")
            else:
                _write(cpu, "cpu.shares", "512")

    def _at(self, directory: Path) -> set[str]:
        return {name for name, path in self.parents.items() if path == directory}

    def create(self, limits: CgroupLimits) -> SandboxCgroup:
        """A new sandbox cgroup under the parent, with ``limits``."""
        name = f"sb-{uuid.uuid4().hex[:16]}"
        made: list[Path] = []
        try:
            for directory in dict.fromkeys(self.parents.values()):
                child = directory / name
                child.mkdir()
                made.append(child)
                _apply(child, limits, version=self.version, controllers=self._at(directory))
        except OSError:
            SandboxCgroup(made, version=self.version).remove()
            raise
        return SandboxCgroup(made, version=self.version)


def _write(directory: Path, name: str, value: str) -> None:
    (directory / name).write_text(value)


def _apply(directory: Path, limits: CgroupLimits, *, version: int, controllers: set[str]) -> None:
    quota = max(1000, int(limits.cpus * _CPU_PERIOD_US))
    if version == 2:
        _write(directory, "memory.max", str(limits.memory_bytes))
        with contextlib.suppress(OSError):  # no swap accounting on this kernel: nothing to cap
            _write(directory, "memory.swap.max", "0")
        _write(directory, "pids.max", str(limits.max_processes))
        _write(directory, "cpu.max", f"{quota} {_CPU_PERIOD_US}")
        return
    if "memory" in controllers:
        _write(directory, "memory.limit_in_bytes", str(limits.memory_bytes))
        with contextlib.suppress(OSError):  # swap must not lift the cap (absent without swap)
            _write(directory, "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
    if "pids" in controllers:
        _write(directory, "pids.max", str(limits.max_processes))
    if "cpu" in controllers:
        _write(directory, "cpu.cfs_period_us", str(_CPU_PERIOD_US))
        _write(directory, "cpu.cfs_quota_us", str(quota))


# --- finding the hierarchy ------------------------------------------------------------------------


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) → this process's cgroup path, from /proc/self/cgroup."""
    found: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _v1_mounts() -> dict[str, Path]:
    """Controller → where its v1 hierarchy is mounted."""
    mounts: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(tail) >= 3 and tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in _CONTROLLERS:
                    mounts[option] = Path(fields[4])
    return mounts


def _v2_host() -> CgroupHost | str:
    own = _own_cgroups().get("")
    if own is None:
        return "this process has no cgroup v2 path"
    base = CGROUP_ROOT / own.lstrip("/")
    available = set((base / "cgroup.controllers").read_text().split())
    missing = [c for c in _CONTROLLERS if c not in available]
    if missing:
        return f"cgroup v2 lacks the {', '.join(missing)} controller(s) here"
    if own != "/" and (base / "cgroup.procs").read_text().split():
        # "No internal processes": a cgroup that hands controllers down holds no process of
        # its own, so this cgroup's processes (this server's included) move to a leaf.
        leaf = base / SERVER_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (base / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                _write(leaf, "cgroup.procs", pid)
    _write(base, "cgroup.subtree_control", " ".join(f"+{c}" for c in _CONTROLLERS))
    parent = base / PARENT
    parent.mkdir(exist_ok=True)
    _write(parent, "cgroup.subtree_control", " ".join(f"+{c}" for c in _CONTROLLERS))
    return CgroupHost({c: parent for c in _CONTROLLERS}, version=2)


def _v1_host() -> CgroupHost | str:
    mounts, own = _v1_mounts(), _own_cgroups()
    missing = [c for c in ("memory", "pids") if c not in mounts or c not in own]
    if missing:
        return f"no cgroup v1 hierarchy for {', '.join(missing)}"
    parents: dict[str, Path] = {}
    for controller in _CONTROLLERS:
        if controller in mounts and controller in own:
            parent = mounts[controller] / own[controller].lstrip("/") / PARENT
            parent.mkdir(exist_ok=True)
            parents[controller] = parent
    return CgroupHost(parents, version=1)


def find_cgroup_host() -> CgroupHost | str:
    """The sandboxes' cgroup parent on this machine (made if missing), or why there is none."""
    try:
        found = _v2_host() if (CGROUP_ROOT / "cgroup.controllers").exists() else _v1_host()
        if isinstance(found, CgroupHost):
            # The parent may exist (made by a root process) but not be ours to write.
            found.create(CgroupLimits(memory_bytes=64 * 2**20, max_processes=8, cpus=1.0)).remove()
    except OSError as exc:
        return f"cgroups are not writable here ({exc.strerror or type(exc).__name__})"
    return found
