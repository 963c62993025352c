"""What the sandbox costs a tool call: the wall time to start a command in it, and the CPU it
adds, against the same command started with its limits only (prlimit; no namespaces, no change
of user).

Each mode runs the same commands one after another, through the code path the ``shell`` and
``code`` tools use (:func:`hermes_core.tools.sandbox.run_command`), and reports per command:
wall time p50/p99, and the CPU the machine spent per command on average (this process,
bubblewrap, prlimit, setpriv and the command itself: run it on an otherwise idle machine).
The difference between the two modes is what the sandbox adds.

Measured 2026-11-25 (2 shared cores, 300 × ``true``): sandboxed p50 6.6 ms, p99 8.7 ms; the
sandbox adds 3.3 ms (p50) / 4.5 ms (p99) of wall time and 3.7 ms of CPU per command.
Re-measured the same day after the isolation work (a cgroup per command, a user per workspace,
seccomp, options through a pipe, the data environment mounted; 200 × ``true``, a quiet
machine): sandboxed p50 11.8 ms, limits only 7.0 ms. Of the sandboxed 11.8 ms, the cgroup
(made, joined, removed once its processes are gone) is 2.7 ms and the data environment's
mounts about 1.7 ms.

    .venv/bin/python -m bench.sandbox [--commands 200] [--command 'true']

Needs bubblewrap (``.ci/sandbox`` installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from hermes_core.tools.sandbox import (
    SandboxLimits,
    SandboxPolicy,
    run_command,
    sandbox_unavailable_reason,
)

LIMITS = SandboxLimits(timeout_seconds=30, max_processes=64)


def _cpu() -> float:
    """Busy CPU seconds of the whole machine so far (``/proc/stat``). Not this process's
    rusage: a sandboxed command runs in its own PID namespace, reaped by bubblewrap's init,
    and its CPU never reaches this process's children's account. Run on an idle machine."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


async def _measure(
    argv: list[str], count: int, policy: SandboxPolicy, workspace: Path
) -> dict[str, float]:
    for _ in range(3):  # warm the page cache and the interpreter's paths
        await run_command(argv, workspace=workspace, limits=LIMITS, policy=policy)
    walls: list[float] = []
    cpu_before = _cpu()
    for _ in range(count):
        started = time.perf_counter()
        result = await run_command(argv, workspace=workspace, limits=LIMITS, policy=policy)
        walls.append(time.perf_counter() - started)
        if result.exit_code != 0:
            raise SystemExit(f"{argv} failed in the sandbox: {result.output}")
    cpu = (_cpu() - cpu_before) / count
    walls.sort()
    return {
        "p50_ms": statistics.median(walls) * 1000,
        "p99_ms": walls[min(len(walls) - 1, round(0.99 * (len(walls) - 1)))] * 1000,
        "cpu_ms": cpu * 1000,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument(
        "--command", default="true", help="a bash command, run as the shell tool runs it"
    )
    args = parser.parse_args()
    reason = sandbox_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"no sandbox here: {reason}")
    argv = ["/bin/bash", "-c", args.command]
    with tempfile.TemporaryDirectory() as directory:
        workspace = Path(directory)
        plain = await _measure(argv, args.commands, SandboxPolicy(unsandboxed=True), workspace)
        boxed = await _measure(argv, args.commands, SandboxPolicy(), workspace)
    print(f"{args.commands} × bash -c {args.command!r}, one at a time")
    print(f"{'':12} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms':>8}")
    for name, row in (("limits only", plain), ("sandboxed", boxed)):
        print(f"{name:12} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} {row['cpu_ms']:8.2f}")
    print(
        f"{'added':12} {boxed['p50_ms'] - plain['p50_ms']:8.2f} "
        f"{boxed['p99_ms'] - plain['p99_ms']:8.2f} {boxed['cpu_ms'] - plain['cpu_ms']:8.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
