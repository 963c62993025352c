"""Throughput of ``serve --workers 1`` and ``--workers 2`` on one PostgreSQL and one Redis:
non-streaming one-call runs against the simulator (in a process of its own), at concurrency 64.

On a 2-core machine the load generator, the simulator, PostgreSQL and Redis share the cores
with the workers, so a second worker cannot double the figure; on a bigger machine it scales
with the cores the workers get.

    d=$(mktemp -d); pg=$(.ci/postgres start $d/pg); redis=$(.ci/redis start $d/redis)
    .venv/bin/python -m bench.workers --database-url "$pg" --redis-url "$redis" [--requests 3000]
    .ci/postgres stop $d/pg; .ci/redis stop $d/redis

Measured 2026-11-25 (2 shared cores, 3,000 runs): --workers 1: 1,448 runs/s; --workers 2:
1,463 runs/s. Both are bound by the machine (the aiohttp load generator and the simulator take
most of a core), not by the worker, so the second worker adds nothing here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.server_overhead import ANSWER, _cpu_seconds, _drive, _free_port, _process, serve_config

UPSTREAM = "bench-workers-upstream"


def _config(directory: Path, simulator: str) -> Path:
    return serve_config(directory, simulator, UPSTREAM)


def measure(workers: int, config: Path, requests: int, concurrency: int) -> tuple[float, float]:
    """Runs per second, and (one worker) the server's CPU milliseconds per run."""
    port = _free_port()
    serve = ["-m", "server.cli", "--log-level", "warning", "serve", "--config", str(config)]
    serve += ["--port", str(port), "--workers", str(workers)]
    base = f"http://127.0.0.1:{port}"
    with _process(serve, base + "/health") as server:
        body: dict[str, object] = {
            "model": "hermes-agent",
            "messages": [{"role": "user", "content": "Say something."}],
        }
        url = f"{base}/v1/chat/completions"
        asyncio.run(_drive(url, body, requests=300, concurrency=concurrency))  # warm up
        cpu, started = _cpu_seconds(server.pid), time.perf_counter()
        asyncio.run(_drive(url, body, requests=requests, concurrency=concurrency))
        rate = requests / (time.perf_counter() - started)
        return rate, (_cpu_seconds(server.pid) - cpu) / requests * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    args = parser.parse_args()
    os.environ.update({"DATABASE_URL": args.database_url, "REDIS_URL": args.redis_url})
    sim_port = _free_port()
    simulator = f"http://127.0.0.1:{sim_port}"
    simulate = ["-m", "server.cli", "--log-level", "warning", "simulate", "--port", str(sim_port)]
    with _process(simulate, simulator + "/health"):
        scenario = {"steps": [{"reply": {"text": ANSWER, "chunk_count": 20}, "repeat": 10_000}]}
        httpx.put(f"{simulator}/_sim/scenarios/{UPSTREAM}", json=scenario).raise_for_status()
        config = _config(Path(tempfile.mkdtemp()), simulator)
        upgrade = [sys.executable, "-m", "server.cli", "db", "upgrade", "--config", str(config)]
        subprocess.run(upgrade, check=True, capture_output=True)
        for workers in (1, 2):
            rate, cpu = measure(workers, config, args.requests, args.concurrency)
            own = f", {cpu:.2f} ms server CPU per run" if workers == 1 else ""
            print(f"--workers {workers}: {rate:7.1f} non-streaming runs/s at concurrency 64{own}")
        # What the replicas' Redis work (event log, run reservations) costs one process.
        del os.environ["REDIS_URL"]
        rate, cpu = measure(1, config, args.requests, args.concurrency)
        print(f"one process without Redis: {rate:7.1f} runs/s, {cpu:.2f} ms server CPU per run")


if __name__ == "__main__":
    main()
