"""Instructions the server executes per request, counted by callgrind: a repeatable measure.

CPU seconds on a small shared VM drift by tens of percent within hours; instruction counts
repeat to about 1.5 %. Use this to compare two versions of the code (run it in each
checkout), and bench/server_overhead.py for the CPU figures the targets are stated in. It
counts no kernel time and does not see timing effects (under valgrind everything is ~50x
slower, so bursts are larger than in real life).

    .venv/bin/python -m bench.instructions [--stream] [--chunks 20] [--requests 200] [--keep]
    .venv/bin/python -m bench.instructions --ledger-cost   # with and without the usage ledger
    .venv/bin/python -m bench.instructions --without metrics  # a part taken off (repeatable)
    .venv/bin/python -m bench.instructions --parts [--stream]  # what each part costs a run
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
from collections.abc import Callable, Set
from pathlib import Path

import httpx

from bench._serve import BENCH_MODEL
from bench.server_overhead import ANSWER, _drive, _free_port, _wait_ready
from server.services import Services


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
        "--without",
        action="append",
        choices=sorted(PARTS),
        default=[],
        help="serve with this part taken off (repeatable): what it costs a run",
    )
    parser.add_argument(
        "--without-ledger", action="store_true", help="the same as --without ledger"
    )
    parser.add_argument(
        "--parts",
        action="store_true",
        help="measure the whole server, then without each part and without a store: a table",
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
        with_ledger = _measure(args)
        without = _measure(args, without={"ledger"})
        print(
            f"usage ledger: {(with_ledger - without) / 1e3:.1f} k instructions per run "
            f"({(with_ledger - without) / without:+.2%}: {with_ledger / 1e6:.3f} M with, "
            f"{without / 1e6:.3f} M without)"
        )
        return 0
    if args.parts:
        _parts(args)
        return 0
    _measure(args, without={*args.without, *(["ledger"] if args.without_ledger else [])})
    return 0


def _parts(args: argparse.Namespace) -> None:
    """The whole server, then each part taken off on its own: what each costs a run, as the
    difference (parts overlap a little: metrics also count the ledger's calls, say)."""
    whole = _measure(args)
    costs = {part: whole - _measure(args, without={part}) for part in sorted(PARTS)}
    args.no_database = True
    costs["store (all saving)"] = whole - _measure(args)
    args.no_database = False
    print(f"\n{'part':<22} {'k instructions per run':>24} {'share':>7}")
    for part, cost in costs.items():
        print(f"{part:<22} {cost / 1e3:>24.0f} {cost / whole:>7.1%}")
    print(f"{'whole server':<22} {whole / 1e3:>24.0f} {1:>7.1%}")


def _measure(args: argparse.Namespace, *, without: Set[str] = frozenset()) -> float:
    """Instructions per run of a server under callgrind (printed, and returned)."""
    sim_port, port = _free_port(), _free_port()
    upstream, server = f"http://127.0.0.1:{sim_port}", f"http://127.0.0.1:{port}"
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    simulate = [sys.executable, "-m", "server.cli", "--log-level", "warning", "simulate"]
    serve = [sys.executable, "-m", "bench._serve", "--upstream", upstream, "--port", str(port)]
    if without:
        serve[1:3] = ["-m", "bench.instructions", SERVE_WITHOUT, ",".join(sorted(without))]
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
    taken_off = f", without {' and '.join(sorted(without))}" if without else ""
    if args.no_database and not args.relay:
        taken_off += ", nothing saved"
    per_run: float = total / args.requests
    who = "the relay: " if args.relay else ""
    print(f"{who}{per_run / 1e6:.2f} M instructions per {kind} ({args.requests} runs{taken_off})")
    return per_run


SERVE_WITHOUT = "--serve-without"
"""``bench.instructions --serve-without PART[,PART] <bench._serve's arguments>``: the benchmark
server with those parts (:data:`PARTS`) taken off, to measure what each costs a run."""


def _without_ledger() -> None:
    """The usage ledger's observer off the run manager, and its hook on each model call, once
    the services are open."""
    from server.usage.ledger import UsageLedger

    open_services = Services.open

    async def open_without_ledger(services: Services) -> None:
        await open_services(services)
        observers = services.runs.observers
        for observer in list(observers):
            if isinstance(getattr(observer, "__self__", observer), UsageLedger):
                observers.remove(observer)
        services.ledger = None  # start_run adds its per-call hook when set

    Services.open = open_without_ledger  # type: ignore[method-assign,assignment]


def _without_metrics() -> None:
    """Prometheus metrics off: the run observer reads no event, a request records nothing.
    (The app takes both from the metrics object when it is built: hence the class.)"""
    from server.metrics.registry import Metrics
    from server.runs.observers import observes

    @observes()  # no kind: the run manager never calls it
    def observe_nothing(self: Metrics, info: object, event: object) -> None:
        return None

    def record_nothing(self: Metrics, endpoint: str, status: int, seconds: float) -> None:
        return None

    Metrics.observe = observe_nothing  # type: ignore[method-assign]
    Metrics.record_request = record_nothing  # type: ignore[method-assign]


PARTS: dict[str, Callable[[], None]] = {
    "ledger": _without_ledger,
    "metrics": _without_metrics,
}
"""What ``--without`` can take off a served benchmark server: each a function that does so,
called before the server is built."""


def _serve_without(parts: list[str], argv: list[str]) -> None:
    from bench import _serve

    for part in parts:
        PARTS[part]()
    sys.argv = ["bench._serve", *argv]
    _serve.main()


if __name__ == "__main__":
    if sys.argv[1:2] == [SERVE_WITHOUT]:
        _serve_without(sys.argv[2].split(","), sys.argv[3:])
    else:
        raise SystemExit(main())
