"""Instructions the server executes per request, counted by callgrind: a repeatable measure.

CPU seconds on a small shared VM drift by tens of percent within hours; instruction counts
repeat to about 1.5 %. Use this to compare two versions of the code (run it in each
checkout), and bench/server_overhead.py for the CPU figures the targets are stated in. It
counts no kernel time and does not see timing effects (under valgrind everything is ~50x
slower, so bursts are larger than in real life).

    .venv/bin/python -m bench.instructions [--stream] [--chunks 20] [--requests 200] [--keep]
    .venv/bin/python -m bench.instructions --ledger-cost   # with and without the usage ledger
    .venv/bin/python -m bench.instructions --relay [--stream]  # the thinnest relay, same load

Needs valgrind (``callgrind_control`` comes with it).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from bench._serve import BENCH_MODEL
from bench.server_overhead import ANSWER, _drive, _free_port, _wait_ready


def _count(files: list[str]) -> int:
    """The instruction total of callgrind's dumps (one per thread and dump)."""
    total = 0
    for name in files:
        lines = Path(name).read_text().splitlines()
        total += max(
            (int(line.split()[1]) for line in lines if line.startswith("totals:")), default=0
        )
    return total


def _callgrind(*command: str, pid: int) -> None:
    quiet = subprocess.DEVNULL
    subprocess.run(
        ["callgrind_control", *command, str(pid)], check=True, stdout=quiet, stderr=quiet
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stream", action="store_true", help="20-chunk streams (default: JSON)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--chunks", type=int, default=20, help="chunks per upstream answer (1: the fixed cost)"
    )
    parser.add_argument(
        "--no-database", action="store_true", help="serve without a store (what saving costs)"
    )
    parser.add_argument(
        "--skills", action="store_true", help="a profile offering skills, as configured ones do"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep callgrind's output for callgrind_annotate"
    )
    parser.add_argument(
        "--without-ledger", action="store_true", help="serve without the usage ledger observer"
    )
    parser.add_argument(
        "--ledger-cost",
        action="store_true",
        help="measure with and without the usage ledger, and print what it costs per run",
    )
    parser.add_argument(
        "--relay",
        action="store_true",
        help="count bench.relay (aiohttp in, aiohttp out) instead: #27's yardstick",
    )
    args = parser.parse_args()
    if args.ledger_cost:
        with_ledger = _measure(args, ledger=True)
        without = _measure(args, ledger=False)
        print(
            f"usage ledger: {(with_ledger - without) / 1e3:.1f} k instructions per run "
            f"({(with_ledger - without) / without:+.2%}: {with_ledger / 1e6:.3f} M with, "
            f"{without / 1e6:.3f} M without)"
        )
        return 0
    _measure(args, ledger=not args.without_ledger)
    return 0


def _measure(args: argparse.Namespace, *, ledger: bool) -> float:
    """Instructions per run of a server under callgrind (printed, and returned)."""
    sim_port, port = _free_port(), _free_port()
    upstream, server = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{port}"
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    simulate = [sys.executable, "-m", "server.cli", "--log-level", "warning", "simulate"]
    serve = [sys.executable, "-m", "bench._serve", "--upstream", upstream, "--port", str(port)]
    if not ledger:
        serve[1:3] = ["-m", "bench.instructions", SERVE_WITHOUT_LEDGER]
    if args.skills:
        serve.append("--skills")
    if args.no_database:
        serve.append("--no-database")
    if args.relay:  # it forwards the body as it is, so the body names the simulator's model
        serve = [sys.executable, "-m", "bench.relay", "--upstream", upstream, "--port", str(port)]
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    simulator = subprocess.Popen([*simulate, "--port", str(sim_port)], stdout=subprocess.DEVNULL)
    hermes = subprocess.Popen(
        [*valgrind, *serve],
        env={**os.environ, "PYTHONMALLOC": "malloc"},  # valgrind sees every allocation
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_ready(upstream + "/health")
        _wait_ready(server + "/health", timeout=300)
        reply = {"text": ANSWER, "chunk_count": args.chunks}
        scenario = {"steps": [{"reply": reply, "repeat": 10_000}]}
        httpx.put(f"{upstream}/_sim/scenarios/{BENCH_MODEL}", json=scenario).raise_for_status()
        body: dict[str, object] = {
            "model": BENCH_MODEL if args.relay else "hermes-agent",
            "messages": [{"role": "user", "content": "Say something."}],
            "stream": args.stream,
        }
        url = f"{server}/v1/chat/completions"
        asyncio.run(_drive(url, body, requests=50, concurrency=args.concurrency))  # warm up
        _callgrind("-i", "on", pid=hermes.pid)
        asyncio.run(_drive(url, body, requests=args.requests, concurrency=args.concurrency))
        _callgrind("-i", "off", pid=hermes.pid)
        _callgrind("-d", pid=hermes.pid)
        total = _count(glob.glob(f"{out}*"))
    finally:
        hermes.terminate()
        simulator.terminate()
        hermes.wait(timeout=30)
        simulator.wait(timeout=10)
    kind = f"{args.chunks}-chunk {'stream' if args.stream else 'non-streaming run'}"
    if args.keep:
        print(f"callgrind output: {out}*")
    else:
        shutil.rmtree(out.parent)
    without = "" if ledger else ", without the usage ledger"
    per_run: float = total / args.requests
    who = "the relay: " if args.relay else ""
    print(f"{who}{per_run / 1e6:.2f} M instructions per {kind} ({args.requests} runs{without})")
    return per_run


SERVE_WITHOUT_LEDGER = "--serve-without-ledger"
"""``bench.instructions --serve-without-ledger <bench._serve's arguments>``: the benchmark
server with the usage ledger's observer taken off the run manager (what it costs per run)."""


def _serve_without_ledger(argv: list[str]) -> None:
    from bench import _serve
    from server.services import Services
    from server.usage.ledger import UsageLedger

    open_services = Services.open

    def _owner(observer: object) -> object:
        return getattr(observer, "__self__", observer)  # a bound method's object

    async def open_without_ledger(services: Services) -> None:
        await open_services(services)
        observers = services.runs.observers
        for ledger in [o for o in observers if isinstance(_owner(o), UsageLedger)]:
            observers.remove(ledger)
        services.ledger = None  # nor its hook on each call (start_run adds it when set)

    Services.open = open_without_ledger  # type: ignore[method-assign,assignment]
    sys.argv = ["bench._serve", *argv]
    _serve.main()


if __name__ == "__main__":
    if sys.argv[1:2] == [SERVE_WITHOUT_LEDGER]:
        _serve_without_ledger(sys.argv[2:])
    else:
        raise SystemExit(main())
