"""What a sandboxed command may use (:class:`SandboxLimits`) and reach (:class:`SandboxPolicy`):
plain settings, shared by the sandbox (``sandbox.py``) and its command line
(``sandbox_launch.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hermes_core.tools.egress.policy import EgressPolicy


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
    sandbox_memory_bytes: int = 2 * 1024**3
    """Memory of the whole sandbox, every process and ``/tmp`` together (cgroups only)."""
    cpus: float = 1.0
    """CPU time per second of the whole sandbox (cgroups only): 1.0 is one core."""
    tmp_bytes: int = 256 * 1024**2
    """The size of the sandbox's ``/tmp`` (in memory, so counted as its memory too)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxPolicy:
    network: bool = False
    """The command may reach the network."""
    unsandboxed: bool = False
    """Run without bubblewrap (limits and the timeout still apply): only where the server
    itself is the sandbox, e.g. a throwaway container."""
    egress: EgressPolicy | None = None
    """With ``network``: where the command may connect, through the egress proxy
    (``tools/egress``); the sandbox keeps its own network namespace then."""
    python: Path | None = None
    """The Python environment commands run (mounted read-only); None: the default one
    (``sandbox_launch.python_environment``)."""
