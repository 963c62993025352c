"""``limits.budget_refresh_seconds`` is reloaded like the other limits: a replica reads its
budgets' ledger at the new interval after a reload; a server alone still never does."""

from __future__ import annotations

from pathlib import Path

from server.bootstrap import build_profiles
from server.budgets.admission import Budgets
from server.config import load_config
from server.process.reload import ConfigReloader
from server.services import Services

FILE = """\
server:
  api_keys: [{{principal: alice, key: sk-budgets-reload-0123456789}}]
providers:
  - {{name: real, model: gpt-x, base_url: "http://127.0.0.1:9/v1"}}
profiles:
  - {{id: hermes-agent, providers: [real]}}
limits: {{budget_refresh_seconds: {seconds}}}
"""


async def _reloaded(tmp_path: Path, budgets: Budgets, seconds: float) -> Services:
    """A server on a file with the default interval, after a reload to ``seconds``."""
    path = tmp_path / "hermes.yaml"
    path.write_text(FILE.format(seconds=2))
    config = load_config(path, {})
    services = Services(profiles=build_profiles(config), budgets=budgets)
    reloader = ConfigReloader(services, config, path, {})
    path.write_text(FILE.format(seconds=seconds))
    assert await reloader.reload()
    return services


async def test_a_reload_changes_how_often_a_replica_reads_its_budgets_again(
    tmp_path: Path,
) -> None:
    services = await _reloaded(tmp_path, Budgets(refresh_seconds=2.0), 0.5)
    assert services.budgets.refresh_seconds == 0.5
    await services.close()


async def test_a_reload_leaves_a_server_alone_never_reading_its_budgets_again(
    tmp_path: Path,
) -> None:
    services = await _reloaded(tmp_path, Budgets(refresh_seconds=None), 0.5)
    assert services.budgets.refresh_seconds is None
    await services.close()
