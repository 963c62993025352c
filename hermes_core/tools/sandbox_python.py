"""The Python environment sandboxed commands run: ``python3`` and the ``code`` tool.

By default the data-and-documents environment (pandas, numpy, matplotlib, scipy, openpyxl,
pypdf, python-docx, python-pptx, pillow; pinned in ``deploy/sandbox-python/``), which ``make``
builds in the checkout and the Docker image ships; ``read_file`` extracts documents with it too.
A profile may name its own (``sandbox.python``). The sandbox mounts it read-only at its own
path, with the prefix of the interpreter a venv was made from when that is not under ``/usr``.
Without one, commands get the system's ``python3``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from hermes_core.tools.sandbox_settings import SandboxPolicy

DEFAULT_PYTHON_ENVIRONMENTS = (
    Path(__file__).resolve().parents[2] / ".sandbox-python",  # what `make` builds in a checkout
    Path("/opt/sandbox-python"),  # what the Docker image ships
)
"""Where the environment is looked for when a profile names none, in this order."""


@dataclass(frozen=True, slots=True)
class PythonEnvironment:
    """A Python environment directory commands run: a venv, or a prefix with ``bin/python3``."""

    root: Path
    base: Path | None
    """The prefix of the interpreter a venv was made from (its standard library), if a venv."""

    @property
    def executable(self) -> str:
        return str(self.root / "bin" / "python3")


def python_environment(configured: Path | None = None) -> PythonEnvironment | None:
    """The environment a profile's commands get: ``configured`` when it names one (even one
    that is missing: check-config says so, and commands then fail plainly), else the first of
    :data:`DEFAULT_PYTHON_ENVIRONMENTS` that exists, else None (the system's ``python3``)."""
    if configured is not None:
        return _environment_at(str(configured))
    for candidate in DEFAULT_PYTHON_ENVIRONMENTS:
        if os.access(candidate / "bin" / "python3", os.X_OK):
            return _environment_at(str(candidate))
    return None


@functools.lru_cache(maxsize=32)
def _environment_at(root: str) -> PythonEnvironment:
    # Cached: every launch asks, and a venv's pyvenv.cfg does not change under a running server.
    base = None
    with contextlib.suppress(OSError):
        for line in Path(root, "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                base = Path(value.strip()).parent  # home is the base's bin directory
    return PythonEnvironment(Path(root), base)


def python_directories(environment: PythonEnvironment | None) -> list[str]:
    """What the sandbox must show for its Python to run (read-only)."""
    if environment is None:
        return [str(Path(system_python()).parent.parent)]
    return [str(environment.root), *([str(environment.base)] if environment.base else [])]


def python_executable(policy: SandboxPolicy | None = None) -> str:
    """The interpreter ``python3`` and the ``code`` tool run in the sandbox under ``policy``:
    its data environment's, else the system's."""
    environment = python_environment(policy.python if policy is not None else None)
    return environment.executable if environment is not None else system_python()


@dataclass(frozen=True, slots=True)
class EnvironmentContents:
    """What commands' Python offers, for ``check-config``."""

    executable: str
    version: str | None
    packages: list[tuple[str, str]]
    """(distribution, version) of what is installed, by name."""
    problem: str | None = None


_TOOLING = frozenset({"pip", "setuptools", "wheel"})


def environment_contents(policy: SandboxPolicy | None = None) -> EnvironmentContents:
    """The interpreter and installed distributions of ``policy``'s environment, read from its
    ``*.dist-info`` directory names: nothing is imported or run."""
    environment = python_environment(policy.python if policy is not None else None)
    if environment is None:
        return EnvironmentContents(
            system_python(),
            None,
            [],
            "no data environment (`make sandbox-python` builds one): the system's python3",
        )
    if not os.access(environment.executable, os.X_OK):
        return EnvironmentContents(
            environment.executable, None, [], f"MISSING: no bin/python3 in {environment.root}"
        )
    packages: list[tuple[str, str]] = []
    versions: list[str] = []
    for site in sorted(environment.root.glob("lib/python3*/site-packages")):
        versions.append(site.parent.name.removeprefix("python"))
        for info in site.glob("*.dist-info"):
            name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
            if name and name.lower() not in _TOOLING:
                packages.append((name, version))
    packages.sort(key=lambda package: package[0].lower())
    return EnvironmentContents(environment.executable, versions[0] if versions else None, packages)


def system_python() -> str:
    """The system's interpreter, else the server's."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return str(Path(sys.base_prefix) / "bin" / "python3")
