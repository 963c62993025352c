"""Instructions one chat request's body costs to read: JSON parsed and validated into the
request model, then split into the agent's request — the "validation" line of what the
server does per run that a relay does not (#27).

Counted by callgrind as a difference, so start-up cancels out: a process that reads the
body ``n`` times against one that reads it zero times, divided by ``n``.

    .venv/bin/python -m bench.request_cost [--times 2000]

Needs valgrind.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BODY = json.dumps(
    {
        "model": "hermes-agent",
        "messages": [{"role": "user", "content": "Say something."}],
        "stream": False,
    }
).encode()
"""The body bench.instructions sends."""


def _read_bodies(times: int) -> None:
    from server.protocol.chat import ChatCompletionRequest

    for _ in range(times):
        request = ChatCompletionRequest.model_validate_json(BODY)
        request.to_agent_request(run_id="run_x")


def _instructions(times: int) -> int:
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-m",
            "bench.request_cost",
            "--read",
            str(times),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PYTHONMALLOC": "malloc", "PATH": "/usr/bin:/bin"},
    )
    totals = [line for line in out.read_text().splitlines() if line.startswith("totals:")]
    return int(totals[0].split()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--times", type=int, default=2000)
    parser.add_argument("--read", type=int, help=argparse.SUPPRESS)  # the measured process
    args = parser.parse_args()
    if args.read is not None:
        _read_bodies(1)  # the first read builds what later ones reuse, in both processes
        _read_bodies(args.read)
        return 0
    per_body = (_instructions(args.times) - _instructions(0)) / args.times
    print(f"{per_body / 1e3:.1f} k instructions to read one chat request's body")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
