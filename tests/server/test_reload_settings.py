"""Which ``server`` settings a reload applies and which need a restart: every setting is one or
the other, never silently neither. Applied: how a busy session's turn behaves, how long an
approval waits, whether a client leaving stops its run, the MCP connect timeout of a request's
own server. Kept (and named in the log): the process's own, such as its port, body limit and
drain; what the new file builds — the tools' guard against this server's own port — describes
the port the server listens on, not the one the file names."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.bootstrap import build_profiles
from server.config import HermesConfig, load_config
from server.process import reload
from server.process.reload import ConfigReloader
from server.services import Services
from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.processes import free_port, hermes_command
from tests.server.served import pid_alive, serving, simulated_provider, sse_data, until

KEY = "sk-reload-settings-0123456789"

FILE = """\
server:
  port: 8100
  api_keys: [{{principal: alice, key: {key}}}]
{server}
providers:
  - {{name: real, model: gpt-x, base_url: "http://127.0.0.1:9/v1"}}
profiles:
  - {{id: hermes-agent, providers: [real]}}
web:
  mcp_connect_timeout_seconds: {mcp}
"""


def _write(path: Path, server: str = "", mcp: float = 10) -> None:
    path.write_text(FILE.format(key=KEY, server=server, mcp=mcp))


def _reloader(path: Path) -> tuple[ConfigReloader, Services]:
    _write(path)
    config = load_config(path, {})
    services = Services(profiles=build_profiles(config))
    return ConfigReloader(services, config, path, {}), services


async def test_a_reload_applies_busy_sessions_approvals_disconnects_and_mcp_connects(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    _write(
        path,
        "  session_busy: reject\n"
        "  session_wait_seconds: 5\n"
        "  approval_timeout_seconds: 60\n"
        "  stop_on_disconnect: false\n",
        mcp=3,
    )
    assert await reloader.reload()
    assert services.session_settings.busy == "reject"
    assert services.session_settings.wait_seconds == 5
    assert services.approvals.expiry_seconds == 60
    assert services.stop_on_disconnect is False
    assert services.remote_mcp_connect_seconds == 3
    await services.close()


async def test_a_reload_changing_the_processs_own_settings_keeps_them_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    _write(path, "  max_body_bytes: 2048\n  drain_seconds: 5\n")
    path.write_text(path.read_text().replace("port: 8100", "port: 8101"))
    assert await reloader.reload()
    assert (
        "config reload: needs a restart, kept as the server started: server.port, "
        "server.max_body_bytes, server.drain_seconds"
    ) in caplog.text
    assert reloader.config.server.port == 8100
    assert reloader.config.server.max_body_bytes == 4 * 1024 * 1024
    # The web tools of the new profiles still refuse the port the server listens on.
    assert services.address_policy.own_ports == frozenset({8100})
    await services.close()


async def test_a_reload_of_an_emptied_file_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    path.write_text("# being rewritten\n")
    assert not await reloader.reload()
    assert "config reload refused" in caplog.text
    assert "the file is empty" in caplog.text
    assert reloader.config.server.api_keys  # the live keys stay
    await services.close()


async def test_a_file_caught_while_it_is_written_is_read_once_it_is_still(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reload, "POLL_SECONDS", 0.05)
    monkeypatch.setattr(reload, "SETTLE_SECONDS", 1.0)
    path = tmp_path / "hermes.yaml"
    reloader, services = _reloader(path)
    applied: list[int] = []  # the keys of each configuration applied
    whole_applied = asyncio.Event()
    real_apply = reloader._apply

    def counted(config: HermesConfig, *rest: Any) -> None:
        applied.append(len(config.server.api_keys))
        real_apply(config, *rest)
        if config.server.api_keys:
            whole_applied.set()

    monkeypatch.setattr(reloader, "_apply", counted)
    watching = asyncio.create_task(reloader._watch())
    try:
        # A rewrite in two steps, as a slow writer makes it: a valid file without its keys
        # (on loopback, a reload may drop them), then the whole one.
        whole = FILE.format(key=KEY, server="", mcp=5)
        path.write_text("".join(line for line in whole.splitlines(True) if "api_keys" not in line))
        await asyncio.sleep(0.2)  # the writer's pause, within the watcher's polls
        path.write_text(whole)
        await asyncio.wait_for(whole_applied.wait(), 20)
    finally:
        watching.cancel()
    assert applied == [1]  # the half-written file was never applied
    assert services.remote_mcp_connect_seconds == 5
    assert [k.principal for k in reloader.config.server.api_keys] == ["alice"]
    await services.close()


class Process:
    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log

    def alive(self) -> bool:
        return pid_alive(self.pid)


@pytest.mark.slow
async def test_a_reloaded_session_busy_reject_answers_a_second_turn_409(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    upstream = "reload-session-busy"
    config = (
        f"server:\n  api_keys: [{{principal: alice, key: {KEY}}}]\n{{busy}}"
        f"providers:\n{simulated_provider(simulator, upstream)}"
        "profiles:\n  - {id: hermes-agent, providers: [sim]}\n"
    )
    simulator.state.script(
        upstream,
        Scenario(
            steps=[
                Step(reply=Reply(text="word " * 40, chunk_count=40), fault=Fault(chunk_delay=0.1))
            ]
        ),
    )
    headers = {"authorization": f"Bearer {KEY}", "x-hermes-session-id": "busy-after-reload"}
    turn = {"model": "hermes-agent", "messages": [{"role": "user", "content": "go"}]}
    with serving(tmp_path, config.replace("{busy}", "")) as served:
        (tmp_path / "hermes.yaml").write_text(config.replace("{busy}", "  session_busy: reject\n"))
        os.kill(served.pid, signal.SIGHUP)
        assert await until(lambda: "live (was" in served.log.read_text(), server=served)
        stream = {**turn, "stream": True}
        async with (
            httpx.AsyncClient(base_url=served.base_url, timeout=60) as http,
            http.stream("POST", "/v1/chat/completions", json=stream, headers=headers) as first,
        ):
            lines = first.aiter_lines()
            async for line in lines:
                if '"content":"word' in line.replace(" ", ""):
                    break
            second = await asyncio.wait_for(
                http.post("/v1/chat/completions", json=turn, headers=headers), 20
            )
            rest = sse_data("\n".join([line async for line in lines]))
        assert second.status_code == 409, second.text
        assert second.json()["error"]["code"] == "session_busy"
        assert rest[-1]["hermes"]["exit_reason"] == "completed"


@pytest.mark.slow
async def test_sighup_to_a_server_without_a_configuration_file_is_answered_in_the_log(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    env = {"HERMES_DATA_DIR": str(tmp_path / "data"), "HERMES_CONFIG": ""}
    with hermes_command("serve", port=free_port(), env=env, log=log) as server:
        watched = Process(server.pid, log)
        server.send_signal(signal.SIGHUP)
        assert await until(lambda: "SIGHUP: nothing to reload" in log.read_text(), server=watched)
        assert server.poll() is None  # not ended by the signal's default action


@pytest.mark.slow
async def test_a_reload_whose_key_command_is_slow_keeps_the_server_answering(
    tmp_path: Path,
) -> None:
    config = FILE.format(key=KEY, server="", mcp=10).replace("port: 8100\n", "")
    slow = config.replace(
        'base_url: "http://127.0.0.1:9/v1"}',
        'base_url: "http://127.0.0.1:9/v1", api_key_command: "sh -c \'sleep 4; echo k\'"}',
    )
    with serving(tmp_path, config) as served:
        (tmp_path / "hermes.yaml").write_text(slow)
        os.kill(served.pid, signal.SIGHUP)
        async with httpx.AsyncClient(base_url=served.base_url, timeout=60) as http:
            started = asyncio.get_running_loop().time()
            while "live (was" not in served.log.read_text():
                began = asyncio.get_running_loop().time()
                assert (await http.get("/health")).status_code == 200
                # The key command runs for 4 s: the loop never waits on it.
                assert asyncio.get_running_loop().time() - began < 2
                assert asyncio.get_running_loop().time() - started < 30
                assert served.alive()
                await asyncio.sleep(0.1)
