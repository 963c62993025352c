"""Server CPU per one-call run, hermes-server beside the thinnest Python relay (issue #27).

Starts the upstream simulator, ``bench/relay.py`` (aiohttp in, aiohttp out) and
``hermes-server serve`` on its defaults (a SQLite store in a temporary data directory), both
pointed at the same simulator; pins each server to core 0 and the simulator and this load
generator to the other cores; then, alternately, drives each server at concurrency 64 with
non-streaming runs and 20-chunk streams and reads the server's CPU time (utime + stime) from
/proc before and after. CPU seconds per completed run is the figure: on a shared machine the
throughput moves with the neighbours, the CPU a run costs much less. Interleaving the servers
and taking medians keeps drift out of the ratio.

    .venv/bin/python -m bench.relay_compare [--requests 3000] [--repeat 5] [--redis-url URL]

``--redis-url`` starts a third server: hermes with the replicas' Redis (event log, run
reservations), to state what Redis adds per run (``.ci/redis start DIR`` gives a URL); with
``--baseline`` too, the baseline's hermes is measured with Redis as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.server_overhead import (
    ANSWER,
    TRANSPORT_ERRORS,
    _cpu_seconds,
    _drive,
    _free_port,
    _process,
    serve_config,
)

UPSTREAM = "bench-relay-upstream"
MODES = ("non-stream", "stream (20 chunks)")


def _config(directory: Path, simulator: str) -> Path:
    return serve_config(directory, simulator, UPSTREAM)


def _for(server: str, body: dict[str, object]) -> dict[str, object]:
    """The relay forwards the body as it is, so it names the simulator's model itself."""
    return {**body, "model": UPSTREAM} if server == "relay" else body


def _pin(pid: int, cores: set[int]) -> None:
    with contextlib.suppress(OSError):  # not allowed here: measure unpinned
        os.sched_setaffinity(pid, cores)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000, help="runs per measurement")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5, help="measurements per server and mode")
    parser.add_argument("--redis-url", default=None, help="also measure hermes with this Redis")
    parser.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="also measure hermes from this checkout (git worktree add DIR REV): before/after, "
        "interleaved",
    )
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    server_core, other_cores = {cores[0]}, set(cores[1:]) or {cores[0]}
    _pin(os.getpid(), other_cores)  # the load generator, and what it starts, off the servers' core
    directory = Path(tempfile.mkdtemp())
    sim_port = _free_port()
    simulator = f"http://127.0.0.1:{sim_port}"
    simulate = ["-m", "server.cli", "--log-level", "warning", "simulate", "--port", str(sim_port)]
    config = _config(directory, simulator)
    servers: dict[str, list[str]] = {}
    relay_port = _free_port()
    servers["relay"] = ["-m", "bench.relay", "--upstream", simulator, "--port", str(relay_port)]
    serve = ["-m", "server.cli", "--log-level", "warning", "serve", "--config", str(config)]
    servers["hermes"] = [*serve, "--port", str(_free_port())]
    if args.redis_url:
        servers["hermes+redis"] = [*serve, "--port", str(_free_port())]
    if args.baseline:
        servers["hermes@baseline"] = [*serve, "--port", str(_free_port())]
    if args.baseline and args.redis_url:
        servers["hermes@baseline+redis"] = [*serve, "--port", str(_free_port())]
    env_redis = os.environ.pop("REDIS_URL", None)  # hermes alone unless asked
    ports = {name: int(argv[-1]) for name, argv in servers.items()}
    with _process(simulate, simulator + "/health"):
        scenario = {"steps": [{"reply": {"text": ANSWER, "chunk_count": 20}, "repeat": 10_000}]}
        script = f"{simulator}/_sim/scenarios/{UPSTREAM}"  # installed again before each batch
        with _servers(servers, ports, args.redis_url, args.baseline) as pids:
            for pid in pids.values():
                _pin(pid, server_core)
            messages = [{"role": "user", "content": "Say something."}]
            plain: dict[str, object] = {"model": "hermes-agent", "messages": messages}
            bodies = {MODES[0]: plain, MODES[1]: {**plain, "stream": True}}
            for name, port in ports.items():  # warm up
                for body in bodies.values():
                    httpx.put(script, json=scenario).raise_for_status()
                    url = f"http://127.0.0.1:{port}/v1/chat/completions"
                    body = _for(name, body)
                    asyncio.run(_drive(url, body, requests=300, concurrency=args.concurrency))
            samples: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.repeat):
                for mode, body in bodies.items():
                    for name, port in ports.items():
                        httpx.put(script, json=scenario).raise_for_status()
                        url = f"http://127.0.0.1:{port}/v1/chat/completions"
                        request = _for(name, body)
                        before = _cpu_seconds(pids[name])
                        done = asyncio.run(
                            _drive(
                                url, request, requests=args.requests, concurrency=args.concurrency
                            )
                        )
                        spent = _cpu_seconds(pids[name]) - before
                        samples.setdefault((name, mode), []).append(spent / len(done) * 1000)
    if env_redis is not None:
        os.environ["REDIS_URL"] = env_redis
    _report(samples, list(servers), args)
    return 0


def _report(
    samples: dict[tuple[str, str], list[float]], names: list[str], args: argparse.Namespace
) -> None:
    print(
        f"server CPU per one-call run, ms (median of {args.repeat} x {args.requests} runs, "
        f"concurrency {args.concurrency}, each server pinned to one core)"
    )
    print(f"  {'server':16s}" + "".join(f"{mode:>28s}" for mode in MODES))
    median = {key: statistics.median(values) for key, values in samples.items()}
    for name in names:
        cells = []
        for mode in MODES:
            values = samples[(name, mode)]
            ratio = median[(name, mode)] / median[("relay", mode)]
            cells.append(
                f"{median[(name, mode)]:6.3f} ({min(values):.2f}-{max(values):.2f}) {ratio:4.1f}x"
            )
        print(f"  {name:16s}" + "".join(f"{cell:>28s}" for cell in cells))
    if "hermes@baseline" in names:
        change = [median[("hermes", m)] / median[("hermes@baseline", m)] - 1 for m in MODES]
        print(
            f"  this tree vs the baseline: {change[0]:+.1%} (non-stream), {change[1]:+.1%} (stream)"
        )
    for tree in ("", "@baseline"):
        if f"hermes{tree}+redis" in names:
            plain, redis = f"hermes{tree}", f"hermes{tree}+redis"
            extra = [median[(redis, m)] - median[(plain, m)] for m in MODES]
            print(
                f"  Redis adds {extra[0]:+.3f} ms (non-stream), {extra[1]:+.3f} ms (stream) per run"
                + (" in the baseline" if tree else "")
            )
    if TRANSPORT_ERRORS:
        print(f"  transport errors in the load generator: {len(TRANSPORT_ERRORS)}")


@contextlib.contextmanager
def _servers(
    servers: dict[str, list[str]],
    ports: dict[str, int],
    redis: str | None,
    baseline: str | None,
) -> Iterator[dict[str, int]]:
    """Every server started (those named +redis with REDIS_URL set, those named @baseline in the
    baseline's directory); their pids while inside."""
    with contextlib.ExitStack() as stack:
        pids: dict[str, int] = {}
        here = os.getcwd()
        for name, argv in servers.items():
            if name.endswith("+redis") and redis:
                os.environ["REDIS_URL"] = redis
            if "@baseline" in name and baseline:
                os.chdir(baseline)  # `-m server.cli` imports from the current directory
            ready = f"http://127.0.0.1:{ports[name]}/health"
            try:
                pids[name] = stack.enter_context(_process(argv, ready)).pid
            finally:
                os.environ.pop("REDIS_URL", None)
                os.chdir(here)
        yield pids


if __name__ == "__main__":
    sys.exit(main())
