"""A real nginx running the shipped ``deploy/nginx.conf`` (compose.yaml's load balancer), for the
load balancer's tests. nginx comes from Debian's package (``.ci/nginx`` installs the binary);
without it those tests skip, except under ``HERMES_REQUIRE_NGINX=1`` (set by ``.ci/run``),
where they fail."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "nginx.conf"
REPLICAS = ("hermes-a:8000", "hermes-b:8000")
"""The replicas the shipped file names (compose's service names)."""


def nginx_or_skip() -> str:
    found = shutil.which("nginx")
    if found is None:
        if os.environ.get("HERMES_REQUIRE_NGINX") == "1":
            pytest.fail("nginx is required (HERMES_REQUIRE_NGINX=1) but not on PATH")
        pytest.skip("nginx is not installed (.ci/nginx installs it)")
    return found


def main_config(directory: Path, site: Path) -> Path:
    """nginx's main file around a conf.d ``site``, as the nginx image has it, with every path
    nginx writes to inside ``directory``."""
    for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (directory / name).mkdir(exist_ok=True)
    config = directory / "nginx.conf"
    # As root, nginx's workers would run as nobody, who may not enter pytest's directories.
    user = "user root;" if os.geteuid() == 0 else ""
    config.write_text(
        f"""
{user}
daemon off;
worker_processes 1;
pid {directory}/nginx.pid;
error_log {directory}/error.log notice;
events {{ worker_connections 512; }}
http {{
    access_log {directory}/access.log;
    client_body_temp_path {directory}/body;
    proxy_temp_path {directory}/proxy;
    fastcgi_temp_path {directory}/fastcgi;
    uwsgi_temp_path {directory}/uwsgi;
    scgi_temp_path {directory}/scgi;
    include {site};
}}
"""
    )
    return config


def site_for(directory: Path, replicas: Mapping[str, int], port: int) -> Path:
    """The shipped site file as it is, but for its addresses: the replicas it names at these
    loopback ports (``{"hermes-a:8000": 41234, …}``), and itself listening on ``port``."""
    text = SHIPPED.read_text()
    for name, replica_port in replicas.items():
        assert f"server {name} " in text, f"deploy/nginx.conf no longer names {name}"
        text = text.replace(f"server {name} ", f"server 127.0.0.1:{replica_port} ")
    assert "listen 8080;" in text
    text = text.replace("listen 8080;", f"listen 127.0.0.1:{port};")
    site = directory / "site.conf"
    site.write_text(text)
    return site


@contextmanager
def running_nginx(directory: Path, replicas: Mapping[str, int], port: int) -> Iterator[str]:
    """nginx with the shipped site in front of ``replicas``; yields its base URL."""
    binary = nginx_or_skip()
    directory.mkdir(parents=True, exist_ok=True)
    config = main_config(directory, site_for(directory, replicas, port))
    process = subprocess.Popen(
        [binary, "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(port, process, directory / "error.log")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited ({process.returncode}):\n{_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nginx never listened on {port}:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text()[-2000:] if log.exists() else "(no log)"
