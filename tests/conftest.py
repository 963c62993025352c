"""Shared fixtures: the upstream simulator on a real socket, and a guard against the internet."""

from __future__ import annotations

import gc
import ipaddress
import socket
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

# Each test process imports the whole server and the SDKs the tests drive before its first test
# (this conftest, then every test module): millions of long-lived objects, which the cyclic
# collector would walk again and again while they are made, for nothing (~0.9 s of the ~5.5 s of
# CPU a process spends collecting). It is off until the collection ends (pytest_collection).
gc.disable()

from server.simulator import SimulatorServer, SimulatorState  # noqa: E402
from tests.databases import ENGINES, MigratedTemplate, fresh_database  # noqa: E402

_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address: Any) -> None:
    """Fail any test that tries to reach a host other than this machine."""
    if self.family in (socket.AF_INET, socket.AF_INET6):
        host = address[0]
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise RuntimeError(f"tests must not reach the network (tried {address!r})")
    _real_connect(self, address)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Collect with the cyclic collector off (see gc.disable above), then move what the imports
    made to the permanent generation: no later full collection walks it again."""
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL runs of the store tests (``-m "not postgres"`` leaves them out)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and any(v == "postgresql" for v in callspec.params.values()):
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(autouse=True, scope="session")
def _no_internet() -> Iterator[None]:
    socket.socket.connect = _loopback_only  # type: ignore[method-assign,assignment]
    yield
    socket.socket.connect = _real_connect  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def _migrated_template(tmp_path_factory: pytest.TempPathFactory) -> MigratedTemplate:
    return MigratedTemplate(tmp_path_factory.mktemp("schema"))


@pytest.fixture(autouse=True)
def _new_sqlite_files_from_the_template(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    _migrated_template: MigratedTemplate,
) -> None:
    """New SQLite databases start as a copy of one migrated database (tests/databases.py)."""
    if request.node.path.name != "test_migrations.py":
        _migrated_template.patch(monkeypatch)


@pytest.fixture(scope="session")
def _simulator_server() -> Iterator[SimulatorServer]:
    with SimulatorServer(SimulatorState()) as server:
        yield server


@pytest.fixture
def simulator(_simulator_server: SimulatorServer) -> SimulatorServer:
    """The upstream simulator, reset for each test (no scenarios, no recordings, empty cache)."""
    _simulator_server.state.reset()
    _simulator_server.state.cache.min_cacheable_tokens = 0
    return _simulator_server


@pytest.fixture(params=ENGINES)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh database for this test, once on SQLite and once on PostgreSQL."""
    async with fresh_database(request.param, tmp_path) as url:
        yield url
