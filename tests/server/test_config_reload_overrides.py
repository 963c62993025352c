"""A reload names the file's settings an environment variable overrides (never their values),
once per reload; one whose edits are all to such settings says that no setting changed in
effect, where the log used to announce the new version live and nothing else."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from server.bootstrap import build_profiles
from server.config import load
from server.process.reload import ConfigReloader
from server.services import Services
from server.simulator import SimulatorServer
from tests.processes import free_port, hermes_command
from tests.server.served import pid_alive, simulated_provider, until

KEY = "sk-overrides-0123456789"
FILE_KEY = "sk-file-key-0123456789abcdef"
EDITED_FILE_KEY = "sk-edited-file-key-0123456789abcdef"
ENV_KEY = "sk-env-key-0123456789abcdef"

FILE = """\
server:
  api_keys: [{{principal: alice, key: {key}}}]
  max_concurrent_runs: {runs}
{more}
providers:
  - {{name: real, model: gpt-x, base_url: "http://127.0.0.1:9/v1"}}
profiles:
  - {{id: hermes-agent, providers: [real]}}
"""
ENVIRON = {"HERMES_MAX_CONCURRENT_RUNS": "50"}
SUMMARY = "config reload: the environment overrides the config file's"


class Process:
    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log

    def alive(self) -> bool:
        return pid_alive(self.pid)


def _write(path: Path, runs: int, more: str = "") -> None:
    path.write_text(FILE.format(key=KEY, runs=runs, more=more))


def _reloader(path: Path) -> tuple[ConfigReloader, Services]:
    _write(path, runs=70)
    loaded = load(path, ENVIRON)
    services = Services(profiles=build_profiles(loaded.config))
    reloader = ConfigReloader(services, loaded.config, path, ENVIRON, shadowed=loaded.shadowed)
    return reloader, services


async def test_a_reload_whose_only_edit_is_overridden_says_no_setting_changed_in_effect(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    _write(path, runs=90)
    assert await reloader.reload()
    assert (
        f"{SUMMARY} server.max_concurrent_runs (HERMES_MAX_CONCURRENT_RUNS; edited in the file, "
        "not applied): the file's values are not used"
    ) in caplog.text
    assert (
        "no setting changed in effect: the file's edits are to settings the environment "
        "overrides (server.max_concurrent_runs)"
    ) in caplog.text
    assert services.runs.max_runs == 50
    await services.close()


async def test_a_reload_with_an_effective_edit_names_the_overrides_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    _write(path, runs=90, more="  session_busy: reject")
    assert await reloader.reload()
    assert caplog.text.count(SUMMARY) == 1
    assert "no setting changed" not in caplog.text
    assert services.session_settings.busy == "reject"
    caplog.clear()
    _write(path, runs=90, more="  session_busy: reject\n# a comment")
    assert await reloader.reload()
    assert caplog.text.count(SUMMARY) == 1
    # Overridden as before, its file value unchanged since the last reload: not an edit.
    assert "edited in the file" not in caplog.text
    assert caplog.text.count("; no setting changed in effect\n") == 1
    await services.close()


@pytest.mark.slow
async def test_a_served_reload_of_an_overridden_key_names_the_variable_and_never_a_key(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    config = (
        "server:\n  api_keys: [{{principal: alice, key: {key}}}]\n"
        f"providers:\n{simulated_provider(simulator, 'overrides')}"
        "profiles:\n  - {{id: hermes-agent, providers: [sim]}}\n"
    )
    path, log = tmp_path / "hermes.yaml", tmp_path / "server.log"
    path.write_text(config.format(key=FILE_KEY))
    port = free_port()
    env = {"HERMES_DATA_DIR": str(tmp_path / "data"), "HERMES_API_KEYS": f"alice:{ENV_KEY}"}
    with hermes_command("serve", "--config", str(path), port=port, env=env, log=log) as server:
        overridden = "server.api_keys (HERMES_API_KEYS"
        assert f"config: the environment overrides the config file's {overridden}" in (
            log.read_text()
        )
        path.write_text(config.format(key=EDITED_FILE_KEY))
        os.kill(server.pid, signal.SIGHUP)

        watched = Process(server.pid, log)
        assert await until(lambda: "live (was" in log.read_text(), server=watched)
        text = log.read_text()
        assert f"{overridden}; edited in the file, not applied)" in text
        assert "no setting changed in effect" in text
        for key in (FILE_KEY, EDITED_FILE_KEY, ENV_KEY):
            assert key not in text
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            edited = {"authorization": f"Bearer {EDITED_FILE_KEY}"}
            assert (await http.get("/v1/models", headers=edited)).status_code == 401
            env_key = {"authorization": f"Bearer {ENV_KEY}"}
            assert (await http.get("/v1/models", headers=env_key)).status_code == 200
