"""Commands' network through a real server: only through the egress proxy, held to the address
guard (never this server's own port, never an internal address unless ``web.allow`` names it
with its port) and, with ``restricted``, to ``allowed_hosts``."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from server.simulator import Scenario, SimulatorServer
from tests.processes import free_port, hermes_command
from tests.server.served import answer, call, sdk_client, tool_results_of

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

KEY = "sk-network-0123456789"
UPSTREAM = "network-agent"

CONFIG = """\
server:
  data_dir: {data}
  api_keys: [{{key: {key}, principal: netter}}]
web:
  allow: ["127.0.0.1:{allowed_port}"]
providers:
  - {{name: sim, model: {upstream}, api_mode: chat_completions, base_url: {simulator}/v1,
     api_key: upstream-key}}
profiles:
  - id: restricted
    providers: [sim]
    tools: [shell]
    approvals: {{shell: never}}
    sandbox: {{network: restricted, allowed_hosts: ["127.0.0.1:{allowed_port}"]}}
  - id: open
    providers: [sim]
    tools: [shell]
    approvals: {{shell: never}}
    sandbox: {{network: true}}
"""


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the allowed server"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def allowed_site() -> Iterator[int]:
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield site.server_address[1]
    site.shutdown()
    site.server_close()


@pytest.fixture(scope="module")
def network_server(
    _simulator_server: SimulatorServer, allowed_site: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    data = tmp_path_factory.mktemp("network-server")
    config: Path = data / "hermes.yaml"
    config.write_text(
        CONFIG.format(
            data=data,
            key=KEY,
            upstream=UPSTREAM,
            simulator=_simulator_server.base_url,
            allowed_port=allowed_site,
        )
    )
    port = free_port()
    with hermes_command("serve", "--config", str(config), port=port, log=data / "server.log"):
        yield f"http://127.0.0.1:{port}"


async def _curls(base_url: str, simulator: SimulatorServer, profile: str, *urls: str) -> str:
    command = "; ".join(f"curl -s -m 10 -o /dev/null -w '{u} %{{http_code}}\\n' {u}" for u in urls)
    simulator.state.script(UPSTREAM, Scenario(steps=[call("shell", command=command), answer("ok")]))
    client: AsyncOpenAI
    async with sdk_client(base_url, KEY) as client:
        await client.chat.completions.create(
            model=profile, messages=[{"role": "user", "content": "fetch"}]
        )
    (result,) = tool_results_of(simulator, UPSTREAM)
    return result


async def test_restricted_commands_reach_allowed_hosts_only(
    network_server: str, simulator: SimulatorServer, allowed_site: int
) -> None:
    own = network_server.rsplit(":", 1)[1]
    other = free_port()
    result = await _curls(
        network_server,
        simulator,
        "restricted",
        f"http://127.0.0.1:{allowed_site}/",
        f"http://127.0.0.1:{other}/",
        f"http://127.0.0.1:{own}/metrics",
        f"http://localhost:{allowed_site}/",
    )

    assert f"http://127.0.0.1:{allowed_site}/ 200" in result
    assert f"http://127.0.0.1:{other}/ 403" in result
    assert f"http://127.0.0.1:{own}/metrics 403" in result
    assert f"http://localhost:{allowed_site}/ 403" in result  # not the name allow-listed


async def test_open_network_still_never_reaches_the_server_or_unlisted_ports(
    network_server: str, simulator: SimulatorServer, allowed_site: int
) -> None:
    own = network_server.rsplit(":", 1)[1]
    other = free_port()
    result = await _curls(
        network_server,
        simulator,
        "open",
        f"http://127.0.0.1:{allowed_site}/",
        f"http://127.0.0.1:{own}/metrics",
        f"http://127.0.0.1:{other}/",
    )

    assert f"http://127.0.0.1:{allowed_site}/ 200" in result
    assert f"http://127.0.0.1:{own}/metrics 403" in result
    assert f"http://127.0.0.1:{other}/ 403" in result


async def test_a_direct_connection_has_no_route(
    network_server: str, simulator: SimulatorServer, allowed_site: int
) -> None:
    result = await _curls(
        network_server, simulator, "open", f"--noproxy '*' http://127.0.0.1:{allowed_site}/"
    )

    assert " 200" not in result
