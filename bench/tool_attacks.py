"""What an attack through the tools costs the other tenants: each attack test of
``tests/server/tools/`` runs against a real ``serve`` process while a victim (another key's
chat, its own ``shell`` echo, ``/health``) is measured, and this prints the victims' median
and worst latency per attack, the quiet baseline first.

    .venv/bin/python -m bench.tool_attacks [pytest selection…]

Needs bubblewrap (``.ci/sandbox``). Run it on an otherwise quiet machine: the figures are
wall-clock times on shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ATTACKS = [
    "tests/server/tools/test_sandbox_attacks.py",
    "tests/server/tools/test_file_tool_attacks.py",
    "tests/server/tools/test_disk_attacks.py",
]


def main(selection: list[str]) -> int:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "victims.jsonl"
        chosen = selection or [a for a in ATTACKS if Path(a).exists()]
        code = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *chosen],
            env={**os.environ, "HERMES_VICTIMS_REPORT": str(report)},
        )
        rows = (
            [json.loads(line) for line in report.read_text().splitlines()]
            if report.exists()
            else []
        )
    print(f"\n{'attack':<62} {'health ms':>17} {'chat ms':>17} {'shell ms':>17}")
    print(f"{'':<62} {'p50 / worst':>17} {'p50 / worst':>17} {'p50 / worst':>17}")
    for row in rows:
        name = row["test"].split("::")[-1]
        cells = [
            f"{row['median_s'][k] * 1000:7.0f} / {row['worst_s'][k] * 1000:6.0f}"
            for k in ("health", "chat", "shell")
        ]
        failed = " (victim failures!)" if row["failures"] else ""
        print(f"{name[:62]:<62} {cells[0]:>17} {cells[1]:>17} {cells[2]:>17}{failed}")
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
