"""The shipped load balancer (``deploy/nginx.conf``, compose.yaml's ``lb``) as real nginx in
front of real replicas: the file is valid as written, a draining replica's new work goes to the
other replica, uploads as large as the server takes get through, and nginx's own refusals come
in the error envelope OpenAI clients parse."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from server.simulator import Fault, Reply, Scenario, SimulatorServer, Step
from tests.databases import fresh_database
from tests.plain_http import TLS_UNUSED
from tests.processes import free_port, hermes_command, wait_until_healthy
from tests.redis_server import redis_url_or_skip
from tests.server.nginx_server import REPLICAS, SHIPPED, main_config, nginx_or_skip, running_nginx
from tests.server.served import pid_alive

QUICK = "lb-quick-upstream"
SLOW = f"lb-slow-{uuid.uuid4().hex[:8]}"
KEY = f"sk-lb-{uuid.uuid4().hex}"
AUTH = {"authorization": f"Bearer {KEY}"}
ASK = {"model": "hermes-agent", "messages": [{"role": "user", "content": "Hello?"}]}


def test_the_shipped_file_is_valid_nginx_as_written(tmp_path: Path) -> None:
    nginx = nginx_or_skip()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap is needed to resolve compose's service names (.ci/sandbox)")
    # compose's service names, resolved as compose's network would: nginx resolves upstream
    # names when it reads the file.
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost hermes-a hermes-b\n")
    config = main_config(tmp_path, SHIPPED)
    checked = subprocess.run(
        [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(hosts), "/etc/hosts", "--",
         nginx, "-t", "-p", str(tmp_path), "-e", str(tmp_path / "error.log"), "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr


def test_no_replica_reachable_is_a_503_in_the_error_envelope(tmp_path: Path) -> None:
    nowhere = {name: free_port() for name in REPLICAS}  # nothing listens there
    with running_nginx(tmp_path / "nginx", nowhere, free_port()) as base:
        answer = httpx.post(f"{base}/v1/chat/completions", json=ASK, headers=AUTH, timeout=30)
    assert answer.status_code == 503
    assert answer.headers["content-type"].startswith("application/json")
    assert answer.headers["retry-after"] == "5"
    assert answer.json()["error"]["code"] == "no_replica_available"


def test_a_body_beyond_the_load_balancers_limit_is_a_413_in_the_error_envelope(
    tmp_path: Path,
) -> None:
    nowhere = {name: free_port() for name in REPLICAS}
    port = free_port()
    with running_nginx(tmp_path / "nginx", nowhere, port):
        # The length alone is enough for nginx to refuse: no need to send 200 MB.
        head = (
            "POST /v1/files HTTP/1.1\r\nHost: lb\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {200 * 1024 * 1024}\r\nConnection: close\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(head.encode())
            reply = _whole_reply(sock)
    status_line, _, rest = reply.decode().partition("\r\n")
    headers, _, body = rest.partition("\r\n\r\n")
    assert status_line.split()[1] == "413"
    assert "content-type: application/json" in headers.lower()
    assert json.loads(body)["error"]["code"] == "request_too_large"


def _whole_reply(sock: socket.socket) -> bytes:
    """The reply read to the end of its body, as its Content-Length says: nginx, refusing a
    body it never read, keeps the connection open for its lingering time (5 s) after it."""
    reply = b""
    while b"\r\n\r\n" not in reply and (chunk := sock.recv(65536)):
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.mark.slow  # a server process behind nginx, and 24 MB both ways through them
def test_an_upload_larger_than_nginx_s_default_reaches_the_server(
    tmp_path: Path, simulator: SimulatorServer
) -> None:
    port = free_port()
    env = {"HERMES_API_KEYS": f"lb:{KEY}", "HERMES_DATA_DIR": str(tmp_path / "data")}
    serve = ("serve", "--config", str(_config(tmp_path, simulator)))
    with hermes_command(*serve, port=port, env=env, log=tmp_path / "serve.log"):
        replicas = dict.fromkeys(REPLICAS, port)  # one replica behind both names
        with running_nginx(tmp_path / "nginx", replicas, free_port()) as base:
            data = os.urandom(24 * 1024 * 1024)  # nginx's default is 1 MB; this file had 16
            uploaded = httpx.post(
                f"{base}/v1/files",
                headers=AUTH,
                files={"file": ("big.bin", data, "application/octet-stream")},
                data={"purpose": "user_data"},
                timeout=120,
            )
            assert uploaded.status_code == 200, uploaded.text
            content = httpx.get(
                f"{base}/v1/files/{uploaded.json()['id']}/content", headers=AUTH, timeout=120
            )
    assert content.content == data


@pytest.fixture
async def postgres(tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database("postgresql", tmp_path) as url:
        yield url


@pytest.fixture
def two_replicas(
    postgres: str, simulator: SimulatorServer, tmp_path: Path
) -> Iterator[dict[str, tuple[int, subprocess.Popen[bytes]]]]:
    """compose's two replicas (each its own data dir and instance) on PostgreSQL and Redis."""
    config = _config(tmp_path, simulator)
    common = {
        "DATABASE_URL": postgres,
        "REDIS_URL": redis_url_or_skip(),
        "HERMES_API_KEYS": f"lb:{KEY}",
        "HERMES_DRAIN_SECONDS": "120",  # a drain that lasts the whole test
        "HERMES_SHARED_DIR": str(tmp_path / "shared"),
    }
    upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
    subprocess.run(upgrade, env={**os.environ, **common}, check=True, capture_output=True)
    with ExitStack() as stack:
        started = {}
        for name in REPLICAS:
            port, label = free_port(), name.split(":")[0]
            env = {**common, "HERMES_DATA_DIR": str(tmp_path / f"data-{label}")}
            process = stack.enter_context(
                hermes_command(
                    "serve",
                    "--config",
                    str(config),
                    port=port,
                    env=env,
                    log=tmp_path / f"{label}.log",
                    wait=False,
                )
            )
            started[name] = (port, process)
        for port, process in started.values():
            wait_until_healthy(f"http://127.0.0.1:{port}", process=process, timeout=60)
        yield started
        for _, process in started.values():  # a second SIGTERM: no waiting out the drain
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)


@pytest.mark.slow
@pytest.mark.postgres
async def test_a_draining_replicas_new_runs_go_to_the_other_replica(
    two_replicas: dict[str, tuple[int, subprocess.Popen[bytes]]],
    simulator: SimulatorServer,
    tmp_path: Path,
) -> None:
    slow = Step(reply=Reply(text="word " * 200, chunk_count=200), fault=Fault(chunk_delay=0.3))
    simulator.state.script(SLOW, Scenario(steps=[slow]))
    (a_port, a_process), _ = two_replicas.values()
    a = f"http://127.0.0.1:{a_port}"
    ports = {name: port for name, (port, _) in two_replicas.items()}
    with running_nginx(tmp_path / "nginx", ports, free_port()) as base:
        async with httpx.AsyncClient(verify=TLS_UNUSED, headers=AUTH, timeout=60) as client:
            # A run in progress on A keeps A draining (up to the drain's 120 s) once signalled.
            body = {**ASK, "model": "hermes-slow", "stream": True}
            async with client.stream("POST", f"{a}/v1/chat/completions", json=body) as stream:
                lines = stream.aiter_lines()
                async for line in lines:
                    if '"content":"word' in line.replace(" ", ""):
                        break
                a_process.send_signal(signal.SIGTERM)
                for _ in range(600):
                    assert pid_alive(a_process.pid), "replica A died instead of draining"
                    if (await client.get(f"{a}/ready")).status_code == 503:
                        break
                    await asyncio.sleep(0.05)
                # The premise: A itself refuses new runs now.
                refused = await client.post(f"{a}/v1/chat/completions", json=ASK)
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "server_draining"

                answers = [
                    await client.post(f"{base}/v1/chat/completions", json=ASK) for _ in range(20)
                ]
                assert [answer.status_code for answer in answers] == [200] * 20
                assert all(answer.json()["choices"][0]["message"]["content"] for answer in answers)


def _config(directory: Path, simulator: SimulatorServer) -> Path:
    config = directory / "hermes.yaml"
    config.write_text(
        f"""
server:
  max_concurrent_runs_per_key: 64
providers:
  - name: quick
    model: {QUICK}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
  - name: slow
    model: {SLOW}
    base_url: "{simulator.base_url}/v1"
    api_mode: chat_completions
profiles:
  - {{id: hermes-agent, providers: [quick]}}
  - {{id: hermes-slow, providers: [slow]}}
"""
    )
    return config
