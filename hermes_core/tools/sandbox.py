"""Running a command in a sandbox: bubblewrap, resource limits, streamed output, no leftovers.

A command sees a read-only system (``/usr``, ``/etc`` and what the interpreter needs), its
workspace writable at ``/workspace``, a private, size-capped ``/tmp``, its own PID namespace,
and no network unless the policy allows it; its environment holds nothing of the server's (no
API keys, no host path). When the server runs as root, each workspace's commands run as an
unprivileged user of their own (:mod:`~hermes_core.tools.sandbox_identity`), so the system's
protected files stay unreadable and the process limit is the workspace's own. New user
namespaces are refused inside (:mod:`~hermes_core.tools.seccomp`).

Limits (:class:`SandboxLimits`): per process, CPU time, address space, processes and file size
(``prlimit``); per sandbox, where the machine has cgroups, memory (``/tmp`` included),
processes and CPU, under a total for all sandboxes (:mod:`~hermes_core.tools.cgroups`); a
wall-clock timeout, and the output kept (the rest is read and counted, not kept). Timeout,
interrupt and cancellation kill the whole tree: the command's process group is killed, and
with it the PID namespace's init, which takes every process inside with it; what is left in
its cgroup is killed too. How the command line is put together: :mod:`.sandbox_launch`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hermes_core.tools import sandbox_launch
from hermes_core.tools.egress import sandbox_network
from hermes_core.tools.sandbox_identity import adopt
from hermes_core.tools.sandbox_launch import WORKDIR
from hermes_core.tools.sandbox_python import python_executable
from hermes_core.tools.sandbox_settings import SandboxLimits, SandboxPolicy
from hermes_core.tools.workspace import Workspace

__all__ = ["WORKDIR", "SandboxLimits", "SandboxPolicy", "python_executable"]

PROGRESS_SECONDS = 0.25
"""Output is reported as progress at most this often."""
KILLED = -9


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandResult:
    exit_code: int
    """The command's exit code; negative for a signal (``-9``: killed)."""
    output: str
    """Standard output and error, interleaved as written, up to the kept limit."""
    output_bytes: int
    """Bytes written in all."""
    timed_out: bool = False
    interrupted: bool = False
    out_of_memory: bool = False
    """The kernel killed a process of the sandbox: its memory was all used."""
    duration_s: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.output_bytes > len(self.output.encode("utf-8", "replace"))


class SandboxUnavailable(RuntimeError):
    """Commands cannot run here as configured (no bubblewrap, or it cannot make namespaces)."""


def sandbox_unavailable_reason() -> str | None:
    """Why sandboxed commands cannot run on this machine, or None when they can."""
    for command in ("bwrap", "prlimit"):
        if shutil.which(command) is None:
            return f"'{command}' is not installed (Debian: apt-get install bubblewrap util-linux)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "'setpriv' is not installed (Debian: util-linux)"
    probe_dir = Path(tempfile.mkdtemp(prefix="hermes-sandbox-probe-"))
    launch = sandbox_launch.prepare(
        ["/bin/true"], workspace=probe_dir, limits=SandboxLimits(), policy=SandboxPolicy()
    )
    try:
        probe = subprocess.run(
            launch.argv, capture_output=True, timeout=30, check=False, pass_fds=launch.pass_fds
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({type(exc).__name__})"
    finally:
        launch.close()
        shutil.rmtree(probe_dir, ignore_errors=True)
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot make its namespaces here: {reason[-1] if reason else '?'}"
    return None


async def run_command(
    argv: list[str],
    *,
    workspace: Path,
    limits: SandboxLimits,
    policy: SandboxPolicy,
    on_output: Callable[[str], None] | None = None,
    wall_seconds: float | None = None,
    inherit_fds: tuple[int, ...] = (),
    skill_folders: Mapping[str, Path] | None = None,
) -> CommandResult:
    """Run ``argv`` in the sandbox in ``workspace``; ``on_output`` gets new output now and then
    while it runs; ``inherit_fds`` reach it open; ``skill_folders`` (name → host folder) are
    mounted read-only at ``/skills/<name>``. Cancelling the caller kills the command and
    everything it started."""
    workspace = Workspace(workspace).ensure()
    await asyncio.to_thread(adopt, workspace)
    wall = min(wall_seconds or limits.timeout_seconds, limits.timeout_seconds)
    started = time.monotonic()
    network = None
    if policy.network and policy.egress is not None and not policy.unsandboxed:
        network = await sandbox_network(policy.egress)
    launch = sandbox_launch.prepare(
        argv,
        workspace=workspace,
        limits=limits,
        policy=policy,
        network=network,
        inherit_fds=inherit_fds,
        skill_folders=skill_folders,
    )
    try:
        process = await asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=workspace,
            # No host path (HOME) reaches even the outer processes: /proc shows their environment.
            env={"PATH": sandbox_launch.PATH, "LANG": "C.UTF-8"},
            start_new_session=True,  # its own process group: killed as one
            pass_fds=launch.pass_fds,
        )
    except BaseException:
        await asyncio.to_thread(launch.close)
        raise
    launch.started()
    output = _Output(limits.max_output_bytes, on_output)
    timed_out = interrupted = False
    try:
        assert process.stdout is not None
        async with asyncio.timeout(wall):
            while chunk := await process.stdout.read(65536):
                output.add(chunk)
            await process.wait()
    except TimeoutError:
        timed_out = True
    except asyncio.CancelledError:
        interrupted = True
        raise
    finally:
        if process.returncode is None:
            _kill_tree(process.pid)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(_ended(process))
        output.flush()
        out_of_memory = launch.cgroup is not None and launch.cgroup.oom_killed()
        await asyncio.shield(asyncio.to_thread(launch.close))
    return CommandResult(
        exit_code=process.returncode if process.returncode is not None else KILLED,
        output=output.text(),
        output_bytes=output.total,
        timed_out=timed_out,
        interrupted=interrupted,
        out_of_memory=out_of_memory,
        duration_s=time.monotonic() - started,
    )


async def _ended(process: asyncio.subprocess.Process) -> None:
    """Wait for a killed command, reading what is left of its output to the end: a command
    that flooded it until the limit stopped the reading left the pipe paused and full, its end
    never seen, and Python 3.11's ``wait()`` waits for that end (the call never returned)."""
    assert process.stdout is not None
    while await process.stdout.read(65536):
        pass
    await process.wait()


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class _Output:
    """What a command wrote: the first ``keep`` bytes, a count of the rest, and progress
    reports at most every ``PROGRESS_SECONDS``."""

    def __init__(self, keep: int, report: Callable[[str], None] | None) -> None:
        self._keep = keep
        self._kept = bytearray()
        self.total = 0
        self._report = report
        self._pending = bytearray()
        self._last_report = 0.0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._keep - len(self._kept)
        if room > 0:
            self._kept += chunk[:room]
        if self._report is not None:
            if len(self._pending) < 16_384:
                self._pending += chunk[: 16_384 - len(self._pending)]
            now = time.monotonic()
            if now - self._last_report >= PROGRESS_SECONDS:
                self.flush()

    def flush(self) -> None:
        if self._report is not None and self._pending:
            self._report(self._pending.decode("utf-8", "replace"))
            self._pending.clear()
            self._last_report = time.monotonic()

    def text(self) -> str:
        return self._kept.decode("utf-8", "replace")
