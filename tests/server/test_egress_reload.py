"""A reload closes the egress proxies of the sandbox network policies no profile has any more,
once the runs on the replaced profiles have ended; a policy still in use keeps its proxy."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from hermes_core.tools.egress import (
    EgressPolicy,
    EgressProxies,
    close_egress_proxies,
    sandbox_network,
)
from hermes_core.tools.egress.network import SandboxNetwork
from server.bootstrap import build_profiles
from server.config import load_config
from server.process.reload import ConfigReloader
from server.profiles import Profile
from server.services import Services

DEADLINE = 30.0
CONFIG = """\
providers:
  - {{name: sim, model: m, base_url: "http://127.0.0.1:9/v1"}}
profiles:
  - id: keeper
    providers: [sim]
    sandbox: {{network: restricted, allowed_hosts: ["pypi.org"]}}
  - id: changing
    providers: [sim]
    sandbox: {{network: restricted, allowed_hosts: ["{host}"]}}
  - id: offline
    providers: [sim]
"""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A Unix socket's path must stay under ~100 bytes: pytest's tmp_path may be longer.
    path = Path(tempfile.mkdtemp(prefix="eg-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def process_proxies() -> AsyncIterator[None]:
    """The process's proxies are shared: leave none running for the next test."""
    yield
    await close_egress_proxies()


def _socket(network: SandboxNetwork) -> Path:
    return Path(network.bwrap_args[1]) / "egress.sock"


def _policy(profiles: list[Profile], profile_id: str) -> EgressPolicy:
    [policy] = [p.egress for p in profiles if p.id == profile_id]
    assert policy is not None
    return policy


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` to hold (polled; a generous deadline for busy CI)."""
    async with asyncio.timeout(DEADLINE):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def _settled(reloader: ConfigReloader) -> None:
    """Wait for what the reload left running: the old profiles' retirement."""
    async with asyncio.timeout(DEADLINE):
        await asyncio.gather(*reloader._tasks)


async def test_closing_unused_proxies_keeps_those_in_use(short_dir: Path) -> None:
    proxies = EgressProxies(short_dir)
    kept_policy = EgressPolicy("restricted", ("pypi.org",))
    kept = await proxies.sandbox_network(kept_policy)
    dropped = await proxies.sandbox_network(EgressPolicy("open"))
    await proxies.close_unused([kept_policy])
    assert _socket(kept).exists()
    assert not _socket(dropped).exists()
    # A later command under the dropped policy gets a new proxy.
    again = await proxies.sandbox_network(EgressPolicy("open"))
    assert _socket(again).exists()
    await proxies.close()


def test_a_profile_without_sandbox_network_names_no_egress_policy(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(CONFIG.format(host="example.org"))
    profiles = build_profiles(load_config(path, {}))
    assert [p.id for p in profiles if p.egress is None] == ["offline"]


async def test_a_reload_closes_a_dropped_policys_proxy_once_the_old_runs_end(
    tmp_path: Path, process_proxies: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hermes.yaml"
    path.write_text(CONFIG.format(host="example.org"))
    config = load_config(path, {})
    services = Services(profiles=build_profiles(config))
    old = list(services.profiles)
    kept = await sandbox_network(_policy(old, "keeper"))
    dropped = await sandbox_network(_policy(old, "changing"))

    # A run on the old profiles is still going as the reload applies.
    run_ends = asyncio.Event()
    run = asyncio.get_running_loop().create_task(run_ends.wait(), name="old run")
    monkeypatch.setattr(services.runs, "live_tasks", lambda: [run])
    reloader = ConfigReloader(services, config, path, {})
    path.write_text(CONFIG.format(host="files.pythonhosted.org"))
    assert await reloader.reload()
    assert _policy(list(services.profiles), "changing") != _policy(old, "changing")

    # The old run may still start commands under the dropped policy: its proxy stays.
    await _until(lambda: bool(reloader._retiring))
    assert _socket(dropped).exists()

    run_ends.set()
    await _settled(reloader)
    assert not _socket(dropped).exists()
    assert _socket(kept).exists()  # an equal policy in the new configuration: still served
    assert await sandbox_network(_policy(list(services.profiles), "keeper")) == kept
    await services.close()
