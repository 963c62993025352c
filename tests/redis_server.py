"""A real Redis server for the replica tests: ``HERMES_TEST_REDIS_URL`` (CI starts one with
``.ci/redis`` and sets ``HERMES_REQUIRE_REDIS=1``), else one of our own when ``redis-server`` is
installed here (stopped when the test session's process exits), else the tests skip.

Under pytest-xdist (the slow pass runs in two processes) only the first worker uses the given
server; the others start their own when they can. What replicas share through Redis is the
server's, not a database's: stop and cooldown channels, per-key run counts, instance leases —
one test's replicas would see another's running beside it."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

URL_ENV = "HERMES_TEST_REDIS_URL"
REQUIRE_ENV = "HERMES_REQUIRE_REDIS"
_SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "redis"


@functools.cache
def redis_url() -> str | None:
    url = os.environ.get(URL_ENV, "").strip()
    first_process = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    installed = shutil.which("redis-server") is not None
    if url and (first_process or not installed):
        return url
    if not installed:
        return None
    directory = tempfile.mkdtemp(prefix="hermes-redis-")
    started = subprocess.run(
        [str(_SCRIPT), "start", directory], capture_output=True, text=True, timeout=60, check=False
    )
    if started.returncode != 0:
        raise RuntimeError(f"redis-server would not start:\n{started.stderr}")
    atexit.register(subprocess.run, [str(_SCRIPT), "stop", directory], check=False)
    return started.stdout.strip()


def redis_url_or_skip() -> str:
    url = redis_url()
    if url is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail("Redis is required (HERMES_REQUIRE_REDIS=1) but not available")
        pytest.skip("no Redis here")
    return url
