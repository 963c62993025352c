"""Running a command in a sandbox: bubblewrap, resource limits, streamed output, no leftovers.

A command sees a read-only system (``/usr``, ``/etc`` and what the interpreter needs), its
workspace writable at ``/workspace``, a private ``/tmp``, its own PID namespace, and no network
unless the policy allows it; its environment holds nothing of the server's (no API keys).
When the server runs as root, the command runs as an unprivileged user (``nobody``), so the
system's protected files stay unreadable and the process limit is the sandbox's own.

Limits (:class:`SandboxLimits`): CPU time, address space, processes and file size per process
(``prlimit``), a wall-clock timeout, and the output kept (the rest is read and counted, not
kept). Timeout, interrupt and cancellation kill the whole tree: the command's process group
is killed, and with it the PID namespace's init, which takes every process inside with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hermes_core.tools.workspace import SANDBOX_USER, Workspace

WORKDIR = "/workspace"
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
"""Read-only in the sandbox (a symlink such as /bin -> usr/bin is recreated as one)."""
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROGRESS_SECONDS = 0.25
"""Output is reported as progress at most this often."""
KILLED = -9


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    timeout_seconds: float = 60.0
    """Wall-clock time a command may take."""
    cpu_seconds: int = 60
    memory_bytes: int = 2 * 1024**3
    """Address space per process."""
    max_processes: int = 128
    """Processes at once (a fork bomb stops here)."""
    max_file_bytes: int = 256 * 1024**2
    """The largest file a command may write."""
    max_output_bytes: int = 200_000
    """Output kept for the model; the rest is counted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxPolicy:
    network: bool = False
    """The command may reach the network."""
    unsandboxed: bool = False
    """Run without bubblewrap (limits and the timeout still apply): only where the server
    itself is the sandbox, e.g. a throwaway container."""


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
    try:
        probe = subprocess.run(
            [*_prefix(SandboxLimits(), SandboxPolicy(), Path("/tmp")), "/bin/true"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({type(exc).__name__})"
    if probe.returncode != 0:
        reason = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot make its namespaces here: {reason[-1] if reason else '?'}"
    return None


def _prefix(limits: SandboxLimits, policy: SandboxPolicy, workspace: Path) -> list[str]:
    """The command line that runs a command with ``limits`` under ``policy``."""
    argv = [
        "prlimit",
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_bytes}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.max_file_bytes}",
        "--core=0",
        "--",
    ]
    if not policy.unsandboxed:
        argv += _bubblewrap(policy, workspace)
    if os.geteuid() == 0:
        # Dropped inside the sandbox, after bubblewrap (still root) has bound paths that
        # `nobody` could not reach: the command keeps no capability and cannot regain one.
        argv += ["setpriv", f"--reuid={SANDBOX_USER}", f"--regid={SANDBOX_USER}"]
        argv += ["--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
        argv += ["--no-new-privs", "--"]
    return argv


def _bubblewrap(policy: SandboxPolicy, workspace: Path) -> list[str]:
    argv = ["bwrap"]
    for path in _SYSTEM:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    interpreter = Path(python_executable()).parent.parent
    if not any(interpreter.is_relative_to(p) for p in _SYSTEM):
        argv += ["--ro-bind", str(interpreter), str(interpreter)]  # the `code` tool's Python
    argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
    argv += ["--bind", str(workspace), WORKDIR, "--chdir", WORKDIR]
    # Root needs no user namespace (and one would not map the sandbox user); anyone else
    # needs one to make the others.
    namespaces = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:
        namespaces.append("--unshare-user")
    if not policy.network:
        namespaces.append("--unshare-net")
    argv += [*namespaces, "--die-with-parent", "--new-session", "--clearenv"]
    argv += ["--setenv", "PATH", _PATH, "--setenv", "HOME", WORKDIR, "--setenv", "LANG", "C.UTF-8"]
    return [*argv, "--"]


def python_executable() -> str:
    """The interpreter the ``code`` tool runs in the sandbox: the system's, else the server's."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return str(Path(sys.base_prefix) / "bin" / "python3")


async def run_command(
    argv: list[str],
    *,
    workspace: Path,
    limits: SandboxLimits,
    policy: SandboxPolicy,
    on_output: Callable[[str], None] | None = None,
    wall_seconds: float | None = None,
) -> CommandResult:
    """Run ``argv`` in the sandbox in ``workspace``; ``on_output`` gets new output now and then
    while it runs. Cancelling the caller kills the command and everything it started."""
    workspace = Workspace(workspace).ensure()
    wall = min(wall_seconds or limits.timeout_seconds, limits.timeout_seconds)
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *_prefix(limits, policy, workspace),
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=workspace,
        env={"PATH": _PATH, "HOME": str(workspace), "LANG": "C.UTF-8"},
        start_new_session=True,  # its own process group: killed as one
    )
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
                await asyncio.shield(process.wait())
        output.flush()
    return CommandResult(
        exit_code=process.returncode if process.returncode is not None else KILLED,
        output=output.text(),
        output_bytes=output.total,
        timed_out=timed_out,
        interrupted=interrupted,
        duration_s=time.monotonic() - started,
    )


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
