"""The command line that starts one sandboxed command, and what it needs while it runs.

From the outside in::

    /bin/sh -c 'join the cgroup' …   the sandbox's cgroup (memory, pids, cpu), when available
    prlimit …                        per-process limits: CPU time, address space, processes…
    bwrap --args FD --               namespaces, a read-only system, the workspace, a sized /tmp
    setpriv --reuid=<uid> …          (root only) the workspace's own user, with no capability
    <command>

bubblewrap reads its options from a pipe (``--args``): inside the sandbox, ``/proc/1/cmdline``
(bubblewrap's own) then shows no host path — not the data directory, not the workspace's
place. The seccomp filter reaches it through a second pipe.

Commands' Python is the sandbox's data environment (:mod:`.sandbox_python`), mounted read-only
at its own path with its ``bin`` first on ``PATH``. The run's skills are mounted read-only at
``/skills/<name>``, so their scripts run by path.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hermes_core.tools import isolation, seccomp
from hermes_core.tools.cgroups import CgroupLimits, SandboxCgroup
from hermes_core.tools.egress.network import SandboxNetwork
from hermes_core.tools.sandbox_identity import per_workspace_users, sandbox_uid
from hermes_core.tools.sandbox_python import (
    PythonEnvironment,
    python_directories,
    python_environment,
    system_python,
)
from hermes_core.tools.sandbox_settings import SandboxLimits, SandboxPolicy

log = logging.getLogger(__name__)

WORKDIR = "/workspace"
SKILLS_DIR = "/skills"
"""Where a run's skill folders are mounted, read-only, one per skill name."""
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
"""Read-only in the sandbox (a symlink such as /bin -> usr/bin is recreated as one)."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSIDE_USER = 65534
"""The id a command sees itself as inside a user namespace (a non-root server's sandbox)."""


@dataclass(slots=True)
class Launch:
    """A prepared command: run ``argv`` passing ``pass_fds``, then :meth:`close`."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    cgroup: SandboxCgroup | None = None
    _fds: list[int] = field(default_factory=list)

    def started(self) -> None:
        """The child has its copies of the pipes: close ours."""
        for descriptor in self._fds:
            with contextlib.suppress(OSError):
                os.close(descriptor)
        self._fds.clear()

    def close(self) -> None:
        """After the command ended: kill what is left in its cgroup and remove it."""
        self.started()
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()
            self.cgroup = None


def _pipe_with(data: bytes) -> int:
    """A pipe's read end, holding ``data`` (written whole now: it fits the pipe's buffer)."""
    read, write = os.pipe()
    try:
        os.write(write, data)
    finally:
        os.close(write)
    return read


def prepare(
    argv: list[str],
    *,
    workspace: Path,
    limits: SandboxLimits,
    policy: SandboxPolicy,
    network: SandboxNetwork | None = None,
    inherit_fds: tuple[int, ...] = (),
    skill_folders: Mapping[str, Path] | None = None,
) -> Launch:
    """How to start ``argv`` in ``workspace`` under ``limits`` and ``policy``; with
    ``network``, its only way out is the egress proxy (``tools/egress``). ``inherit_fds``
    reach the command open (e.g. a document to read, with no path to it inside).
    ``skill_folders`` (name → host folder) appear read-only at ``/skills/<name>``."""
    launch = Launch(argv=[])
    try:
        outer = _rlimits(limits)
        if not policy.unsandboxed:
            outer += _bubblewrap(launch, limits, policy, workspace, network, skill_folders or {})
        if network is not None:
            argv = network.wrap(argv, system_python())  # the bridge first, then argv
        inner = _drop_to_workspace_user(workspace)
        launch.argv = [*_join_cgroup(launch, limits), *outer, *inner, *argv]
        launch.pass_fds = (*launch._fds, *inherit_fds)
    except BaseException:
        launch.close()
        raise
    return launch


def _rlimits(limits: SandboxLimits) -> list[str]:
    return [
        "prlimit",
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.max_file_bytes}",
        "--core=0",
        "--",
    ]


def _join_cgroup(launch: Launch, limits: SandboxLimits) -> list[str]:
    host = isolation.cgroup_host()
    if host is None:
        return []
    try:
        launch.cgroup = host.create(
            CgroupLimits(
                memory_bytes=limits.sandbox_memory_bytes,
                max_processes=limits.max_processes,
                cpus=limits.cpus,
            )
        )
    except OSError as exc:
        # Rlimits still hold; one lost cgroup must not stop every command.
        log.warning("a sandbox cgroup could not be made (%s): rlimits only", exc.strerror or exc)
        return []
    return launch.cgroup.join


def _drop_to_workspace_user(workspace: Path) -> list[str]:
    if not per_workspace_users():
        return []
    # After bubblewrap (still root) has bound what it needs: the command keeps no capability
    # and cannot regain one.
    uid = sandbox_uid(workspace)
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]


def _bubblewrap(
    launch: Launch,
    limits: SandboxLimits,
    policy: SandboxPolicy,
    workspace: Path,
    network: SandboxNetwork | None,
    skill_folders: Mapping[str, Path],
) -> list[str]:
    options: list[str] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            options += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            options += ["--ro-bind", path, path]
    options += ["--dev", "/dev", "--proc", "/proc"]
    options += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    environment = python_environment(policy.python)
    options += _python_mounts(environment)  # after /tmp's tmpfs, which would hide one there
    options += _skill_mounts(skill_folders)
    options += ["--bind", str(workspace), WORKDIR, "--chdir", WORKDIR]
    # Root needs no user namespace (one would not map the workspace's user); anyone else
    # needs one to make the others.
    options += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if not per_workspace_users():
        options += ["--unshare-user", "--uid", str(INSIDE_USER), "--gid", str(INSIDE_USER)]
    if policy.network and policy.egress is None:
        log.warning("a command was given the host's network: no egress policy to hold it to")
    else:
        # Loopback only: the egress bridge, when there is one, is the way out.
        options.append("--unshare-net")
    if network is not None:
        # bubblewrap would make the mount point's parents readable by root alone.
        options += ["--perms", "0755", "--dir", "/run"]
        options += network.bwrap_args
    options += ["--die-with-parent", "--new-session", "--clearenv"]
    search = PATH if environment is None else f"{environment.root}/bin:{PATH}"
    options += [
        "--setenv",
        "PATH",
        search,
        "--setenv",
        "HOME",
        WORKDIR,
        "--setenv",
        "LANG",
        "C.UTF-8",
    ]
    options += ["--setenv", "MPLCONFIGDIR", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    # No display and no writable home: matplotlib must draw to files from the first figure.
    options += ["--setenv", "MPLBACKEND", "Agg"]
    for name, value in (network.env if network is not None else {}).items():
        options += ["--setenv", name, value]  # after --clearenv, which would drop them
    if seccomp.supported():
        launch._fds.append(_pipe_with(seccomp.no_user_namespaces_filter()))
        options += ["--seccomp", str(launch._fds[-1])]
    launch._fds.append(_pipe_with(b"".join(os.fsencode(o) + b"\0" for o in options)))
    return ["bwrap", "--args", str(launch._fds[-1]), "--"]


def _skill_mounts(folders: Mapping[str, Path]) -> list[str]:
    """Options showing each skill's folder read-only at ``/skills/<name>`` (names are checked
    skill names: lowercase letters, digits and hyphens, so never a path of their own)."""
    if not folders:
        return []
    # bubblewrap would make /skills readable by root alone: not by the command.
    options = ["--perms", "0755", "--dir", SKILLS_DIR]
    for name in sorted(folders):
        if "/" in name or name in ("", ".", ".."):
            continue
        options += ["--ro-bind", str(folders[name]), f"{SKILLS_DIR}/{name}"]
    return options


def _python_mounts(environment: PythonEnvironment | None) -> list[str]:
    """Options showing commands' Python read-only, where the system's mounts do not already."""
    options: list[str] = []
    made: set[Path] = set()
    for directory in python_directories(environment):
        if any(Path(directory).is_relative_to(p) for p in _SYSTEM):
            continue
        # bubblewrap would make the parents readable by root alone: not by the command.
        for parent in reversed(Path(directory).parents[:-1]):
            if parent not in made:
                made.add(parent)
                options += ["--perms", "0755", "--dir", str(parent)]
        options += ["--ro-bind", directory, directory]
    return options
