"""Two real ``serve`` replicas of one deployment (one fresh PostgreSQL database, the test
Redis, one shared volume) on a configuration of the test's own: the budget suites' deployment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.databases import fresh_database
from tests.processes import free_port, hermes_command, wait_until_healthy
from tests.redis_server import redis_url_or_skip


@dataclass(frozen=True, slots=True)
class Replica:
    base_url: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None


@pytest.fixture
async def postgres(tmp_path: Path) -> AsyncIterator[str]:
    """A database of this test's own."""
    async with fresh_database("postgresql", tmp_path) as url:
        yield url


@contextmanager
def two_replicas(config_text: str, postgres: str, directory: Path) -> Iterator[list[Replica]]:
    """Replicas A and B serving ``config_text`` on ``postgres`` (migrated first), each with a
    data directory of its own under ``directory``, both answering."""
    redis = redis_url_or_skip()
    config = directory / "hermes.yaml"
    config.write_text(config_text)
    common = {
        "DATABASE_URL": postgres,
        "REDIS_URL": redis,
        "HERMES_SHARED_DIR": str(directory / "shared"),  # one volume, as deployed
    }
    upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
    subprocess.run(upgrade, env={**os.environ, **common}, check=True, capture_output=True)
    with ExitStack() as stack:
        started = []
        for name in "AB":
            port, log = free_port(), directory / f"replica-{name}.log"
            env = {**common, "HERMES_DATA_DIR": str(directory / f"data-{name}")}
            serve = ("serve", "--config", str(config))
            process = stack.enter_context(
                hermes_command(*serve, port=port, env=env, log=log, wait=False)
            )
            started.append(Replica(f"http://127.0.0.1:{port}", process, log))
        for replica in started:  # started together: waited for together
            wait_until_healthy(replica.base_url, process=replica.process, timeout=60)
        yield started
