"""What a reload refuses before it applies anything: a file that would serve nothing (no
upstream, on a server that did not start the built-in simulator) or would serve anyone (no keys
on a server reachable from outside). The live configuration stays, and runs go on answering."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.bootstrap import build_profiles
from server.config import load_config
from server.process.reload import ConfigReloader
from server.services import Services

REAL_UPSTREAM = """\
server:
  host: {host}
  api_keys: [{{principal: alice, key: sk-reload-checks-0123456789}}]
providers:
  - {{name: real, model: gpt-x, base_url: "http://127.0.0.1:9/v1"}}
profiles:
  - {{id: hermes-agent, providers: [real]}}
"""


def _reloader(path: Path, host: str = "127.0.0.1") -> tuple[ConfigReloader, Services]:
    path.write_text(REAL_UPSTREAM.format(host=host))
    config = load_config(path, {})
    services = Services(profiles=build_profiles(config))
    return ConfigReloader(services, config, path, {}), services


@pytest.mark.parametrize(
    "text",
    [
        "server: {api_keys: [{principal: alice, key: sk-reload-checks-0123456789}]}\n",
        "server: {api_keys: [{principal: alice, key: sk-reload-checks-0123456789}]}\n"
        "profiles: [{id: hermes-agent, providers: [simulator]}]\n",
    ],
    ids=["no providers or profiles", "a profile on the simulator"],
)
async def test_a_file_with_no_upstream_is_refused_and_the_live_config_stays(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    live = list(services.profiles)
    path.write_text(text)
    assert not await reloader.reload()
    assert services.profiles == live
    assert [p.chains[0].name for p in services.profiles] == ["real"]
    assert "configures no upstream model" in caplog.text
    await services.close()


async def test_a_file_naming_an_upstream_is_applied(tmp_path: Path) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    path.write_text(REAL_UPSTREAM.format(host="127.0.0.1").replace("gpt-x", "gpt-y"))
    assert await reloader.reload()
    await services.close()


async def test_removing_every_key_of_a_server_reachable_from_outside_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path, host="0.0.0.0")
    path.write_text(REAL_UPSTREAM.format(host="0.0.0.0").replace("  api_keys:", "  #"))
    assert not await reloader.reload()
    await services.close()
