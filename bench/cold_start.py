"""How long ``hermes-server serve`` takes to answer: process start to the first ``/health`` 200.

Starts the server as CI and the tests do (``python -m server.cli serve``), polls ``/health``
every 5 ms, and reports the median of ``--runs`` starts (with the range), per scenario:

- ``defaults``: the embedded defaults (no configuration: the built-in simulator, SQLite);
- ``configured``: a profile with every toolset (files, shell, code, web), an MCP server over
  stdio and the web tools' settings — what a real deployment loads.

Each scenario is measured twice: on a **new** data directory (the first start: the schema is
created) and on an **existing** one (a restart: the schema is already current), the common
case. The server process's own CPU time up to the first 200 is reported too: unlike the wall
time, it hardly moves when the machine is busy. ``--load N`` keeps N extra processes spinning
meanwhile (a loaded machine, as CI is when its tests start servers in parallel). Last, the
heaviest of serve's imports (``python -X importtime``), by top-level package, and
which of the modules a server need not import at start it does import.

    .venv/bin/python -m bench.cold_start [--runs 7] [--load 0] [--scenario defaults]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TIMEOUT_SECONDS = 120.0

LAZY_MODULES = (
    "aiohttp",
    "mcp",
    "mcp_types",
    "trafilatura",
    "lxml",
    "alembic",
    "anthropic",
    "openai",
    "jsonschema",
    "redis",
    "pandas",
    "numpy",
)
"""Modules the embedded defaults need not import to answer /health: the bench lists those
serve's imports load (``tests/server/test_cold_start_imports.py`` guards it)."""

CONFIGURED = """\
server:
  data_dir: {data}
web:
  allow: ["127.0.0.1"]
providers:
  - name: sim
    model: cold-start
    api_mode: chat_completions
    base_url: http://127.0.0.1:9/v1
    api_key: cold-start-key
  - name: claude
    model: claude-sonnet-4-5
    api_mode: anthropic_messages
    base_url: http://127.0.0.1:9
    api_key: cold-start-key
profiles:
  - id: hermes-agent
    providers: [sim, claude]
    tools: [files, shell, code, web]
    mcp_servers:
      - name: workshop
        command: {python}
        args: ["-m", "tests.mcp_servers.workshop", "stdio"]
        cwd: {repo}
"""
"""Every toolset, an MCP server, two protocols' providers (their upstream is never called)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def _healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@dataclass(frozen=True, slots=True)
class Start:
    wall: float
    """Seconds from Popen to the first /health 200."""
    cpu: float
    """The server process's CPU seconds (user + system) by then."""


def start_once(data: Path, config: str | None) -> Start:
    """Start a server on ``data``, time it to its first /health 200, stop it."""
    port = _free_port()
    command = [sys.executable, "-m", "server.cli", "--log-level", "warning", "serve"]
    command += ["--port", str(port)]
    env = {**os.environ, "HERMES_DATA_DIR": str(data)}
    for name in (
        "HERMES_CONFIG",
        "HERMES_UPSTREAM_BASE_URL",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
    ):
        env.pop(name, None)
    if config is not None:
        path = data.with_suffix(".yaml")
        path.write_text(config.format(data=data, python=sys.executable, repo=REPO))
        command += ["--config", str(path)]
    began = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        while not _healthy(port):
            if process.poll() is not None:
                _, err = process.communicate()
                raise RuntimeError(f"the server exited with {process.returncode}: {err.decode()}")
            if time.perf_counter() - began > TIMEOUT_SECONDS:
                raise RuntimeError("the server never answered /health")
            time.sleep(0.005)
        wall = time.perf_counter() - began
        cpu = _cpu_seconds(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return Start(wall, cpu)


def measure(config: str | None, runs: int, *, existing: bool) -> list[Start]:
    """``runs`` starts, each on a data directory of its own; ``existing``: one the server
    already started on once (so the schema is current), else a new one."""
    starts: list[Start] = []
    with tempfile.TemporaryDirectory(prefix="hermes-cold-") as root:
        for n in range(runs):
            data = Path(root) / f"data{n}"
            if existing:
                start_once(data, config)
            starts.append(start_once(data, config))
            shutil.rmtree(data, ignore_errors=True)
    return starts


def summary(starts: list[Start]) -> str:
    walls = [s.wall for s in starts]
    cpus = [s.cpu for s in starts]
    return (
        f"wall {statistics.median(walls):.2f} s ({min(walls):.2f}–{max(walls):.2f}), "
        f"CPU {statistics.median(cpus):.2f} s ({min(cpus):.2f}–{max(cpus):.2f})"
    )


@contextlib.contextmanager
def spinning(processes: int) -> Iterator[None]:
    """``processes`` busy loops running meanwhile: a loaded machine."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(processes)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


SERVE_IMPORTS = (
    "server.cli",
    "server.app",
    "server.bootstrap",
    "server.process.reload",
    "server.process.workers",
    "server.http.connection_limits",
    "uvicorn",
)
"""What ``serve`` imports before it starts (``server.cli`` itself imports them in ``_serve``)."""


def import_offenders(top: int = 15) -> tuple[list[str], list[str]]:
    """The heaviest top-level packages serve's imports load (self time summed, ms), and which
    of :data:`LAZY_MODULES` they load."""
    probe = f"import {', '.join(SERVE_IMPORTS)}, sys; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    by_package: collections.Counter[str] = collections.Counter()
    for line in result.stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if match:
            by_package[match.group(4).split(".")[0]] += int(match.group(1))
    total = sum(by_package.values())
    rows = [f"total {total / 1000:.0f} ms (under -X importtime, which inflates it)"]
    rows += [f"{us / 1000:7.1f} ms  {name}" for name, us in by_package.most_common(top)]
    loaded = set(result.stdout.split())
    return rows, [name for name in LAZY_MODULES if name in loaded]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="starts per measurement (median)")
    parser.add_argument("--load", type=int, default=0, help="busy processes meanwhile")
    parser.add_argument("--scenario", choices=["defaults", "configured", "both"], default="both")
    parser.add_argument("--no-imports", action="store_true", help="skip the import report")
    args = parser.parse_args()
    scenarios = {"defaults": None, "configured": CONFIGURED}
    if args.scenario != "both":
        scenarios = {args.scenario: scenarios[args.scenario]}
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores, {args.load} spinning")
    with spinning(args.load):
        for name, config in scenarios.items():
            for existing in (True, False):
                starts = measure(config, args.runs, existing=existing)
                label = "restart" if existing else "new data"
                print(f"{name:10} {label:8}: {summary(starts)}", flush=True)
    if not args.no_imports:
        rows, loaded = import_offenders()
        print("\nserve's imports, by top-level package (self time):")
        for row in rows:
            print(f"  {row}")
        print(f"loaded though not needed at start: {', '.join(loaded) or 'none'}")


if __name__ == "__main__":
    main()
