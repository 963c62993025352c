"""The configuration reloads without a restart, against a real ``serve`` process: a changed
file adds a profile and a key while a run streams on (it finishes on the config it started
with); an invalid file is refused, named in the log, and the live configuration stays."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command
from tests.server.served import sse_data, until

pytestmark = pytest.mark.slow

KEY = "sk-reload-alice-0123456789"
KEY_BOB = "sk-reload-bob-0123456789"
UPSTREAM = "reload-upstream"

CONFIG = """
server:
  data_dir: {data}
  api_keys:
    - {{principal: alice, key: {key}}}
{more_keys}
providers:
  - name: sim
    model: {upstream}
    base_url: "{simulator}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [sim]}}
{more_profiles}
"""


class Process:
    def __init__(self, process: Any, log: Path) -> None:
        self.process, self.log = process, log

    def alive(self) -> bool:
        return bool(self.process.poll() is None)


def _write(path: Path, simulator: SimulatorServer, *, bob: bool, extra: str = "") -> None:
    path.write_text(
        CONFIG.format(
            data=path.parent / "data",
            key=KEY,
            more_keys=f"    - {{principal: bob, key: {KEY_BOB}}}" if bob else "",
            upstream=UPSTREAM,
            simulator=simulator.base_url,
            more_profiles=extra,
        )
    )


async def test_a_reload_adds_a_profile_and_a_key_while_a_run_streams_on(
    simulator: SimulatorServer, tmp_path: Path
) -> None:
    reply = Reply(text="word " * 40, chunk_count=40)
    simulator.state.script(
        UPSTREAM, Scenario(steps=[Step(reply=reply, fault=Fault(chunk_delay=0.1))])
    )
    config = tmp_path / "hermes.yaml"
    _write(config, simulator, bob=False)
    port, log = free_port(), tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    body = {
        "model": "hermes-agent",
        "stream": True,
        "messages": [{"role": "user", "content": "go"}],
    }
    with hermes_command("serve", "--config", str(config), port=port, log=log) as server:
        watched = Process(server, log)
        async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=base, timeout=60) as http:
            alice = {"authorization": f"Bearer {KEY}"}
            bob = {"authorization": f"Bearer {KEY_BOB}"}
            assert (await http.get("/v1/models", headers=bob)).status_code == 401
            async with http.stream(
                "POST", "/v1/chat/completions", json=body, headers=alice
            ) as stream:
                lines = stream.aiter_lines()
                async for line in lines:
                    if '"content":"word' in line.replace(" ", ""):
                        break
                _write(
                    config,
                    simulator,
                    bob=True,
                    extra="  - {id: hermes-extra, providers: [sim], tools: [web]}",
                )

                async def reloaded() -> bool:
                    models = await http.get("/v1/models", headers=bob)
                    return models.status_code == 200 and "hermes-extra" in models.text

                assert await until(reloaded, server=watched, seconds=20)
                rest = sse_data("\n".join([line async for line in lines]))
            assert rest[-1]["hermes"]["exit_reason"] == "completed"
            metrics = (await http.get("/metrics")).text
            live = [
                line
                for line in metrics.splitlines()
                if line.startswith("hermes_config_version_info") and line.endswith(" 1.0")
            ]
            assert len(live) == 1
            assert 'hermes_config_reloads_total{result="applied"} 1.0' in metrics

            # An invalid file (an unknown toolset) is refused on SIGHUP; the live one stays.
            config.write_text(config.read_text().replace("tools: [web]", "tools: [teleport]"))
            server.send_signal(signal.SIGHUP)

            def refused() -> bool:
                return "config reload refused" in log.read_text()

            assert await until(refused, server=watched, seconds=20)
            assert "teleport" in log.read_text()
            models = await http.get("/v1/models", headers=bob)
            assert models.status_code == 200
            assert "hermes-extra" in models.text
            after = (await http.get("/metrics")).text
            assert [
                line
                for line in after.splitlines()
                if line.startswith("hermes_config_version_info") and line.endswith(" 1.0")
            ] == live
