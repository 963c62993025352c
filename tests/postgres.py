"""A real PostgreSQL server for the tests, beside the embedded SQLite.

The store runs on SQLite by default and on PostgreSQL in production, and the two differ where it
matters (types, transactions, locking, concurrent writers): tests run only against SQLite would
miss PostgreSQL's failures. So the store's tests run against both, and this module finds the
PostgreSQL:

- ``HERMES_TEST_POSTGRES_URL``, if set: CI (``.ci/run``) starts a throwaway cluster with
  ``.ci/postgres`` and exports its URL, with ``HERMES_REQUIRE_POSTGRES=1`` so that the
  PostgreSQL tests fail, rather than skip, if the server is missing;
- else, if PostgreSQL is installed here, a throwaway cluster of our own, started with
  ``.ci/postgres`` once per test session and stopped when the session's process exits;
- else none: the PostgreSQL tests skip (unless PostgreSQL is required).

If PostgreSQL is installed but the cluster fails to start (tried once), ``postgres_url`` raises
with the script's log: that is a broken machine, not a missing server, and skipping would hide it.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

URL_ENV = "HERMES_TEST_POSTGRES_URL"
REQUIRE_ENV = "HERMES_REQUIRE_POSTGRES"

_SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "postgres"
_START_TIMEOUT = 120.0  # seconds; a start takes about one
_STOP_TIMEOUT = 60.0


def require_postgres() -> bool:
    """Whether the PostgreSQL tests must fail, not skip, when there is no PostgreSQL."""
    return os.environ.get(REQUIRE_ENV) == "1"


def binaries_available() -> bool:
    """Whether PostgreSQL is installed here (where ``.ci/postgres`` looks for it)."""
    return shutil.which("initdb") is not None or bool(glob.glob("/usr/lib/postgresql/*/bin/initdb"))


@functools.cache
def postgres_url() -> str | None:
    """The SQLAlchemy URL (``postgresql+asyncpg://…``) of a PostgreSQL database for the tests.

    The same for the whole test session; ``None`` when there is no PostgreSQL here.
    """
    url = os.environ.get(URL_ENV)
    if url:
        return url
    if not binaries_available():
        return None
    url, error = _local_cluster()
    if url is None:
        raise RuntimeError(error)
    return url


@functools.cache
def _local_cluster() -> tuple[str | None, str]:
    """Start a throwaway cluster (once): its URL, or ``None`` and why it did not start."""
    directory = tempfile.mkdtemp(prefix="hermes-pg-")
    # Registered first, so that a half-started cluster is stopped as well.
    atexit.register(_stop_cluster, directory)
    try:
        result = subprocess.run(
            ["bash", str(_SCRIPT), "start", directory],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_START_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return None, f".ci/postgres start {directory} took over {exc.timeout:.0f} s"
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != 1:
        return None, (
            f".ci/postgres start {directory} failed (exit {result.returncode}):\n"
            f"{result.stderr}{result.stdout}"
        )
    return lines[0], ""


def _stop_cluster(directory: str) -> None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            ["bash", str(_SCRIPT), "stop", directory],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_STOP_TIMEOUT,
            check=False,
        )
    shutil.rmtree(directory, ignore_errors=True)
