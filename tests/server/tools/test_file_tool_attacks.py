"""One tenant's file-tool calls attack the server through a real process; another tenant's
chat, its ``shell`` and ``/health`` must not notice (see ``victims.py``), and the attacker's
run ends.

The attacks, as reported against a real server: a regex that backtracks for ever, FIFOs that
block whoever opens them (a tool, or the workspace download route), and parallel reads of a
file far larger than a page.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from server.simulator import SimulatorServer
from tests.server.tools.conftest import (
    ToolServer,
    answer,
    call,
    calls,
    script,
    tool_results,
)
from tests.server.tools.victims import (
    VictimLatencies,
    assert_run_ended,
    attacker_turn,
    baseline,
    watch_victims,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

T = TypeVar("T")
FIFOS = 12
BIG_FILE_BYTES = 250 * 1024 * 1024
RSS_GROWTH_BOUND_KB = 300 * 1024
"""What the server may grow by while six 250 MB files are read at once (it grew by 2 GB when
each read took the file whole); loose, for allocator slack on a busy machine."""


async def _watched(
    server: ToolServer, name: str, attack: Awaitable[T]
) -> tuple[T, VictimLatencies]:
    """``attack`` run while the victims are measured, with their quiet worst first; both are
    printed for the report (``pytest -s``)."""
    quiet = await baseline(server)
    result, seen = await watch_victims(server, attack)
    print(f"\n{name}: victims' worst latencies, quiet {quiet.worst()}, attacked {seen.worst()}")
    return result, seen


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


async def test_a_catastrophic_regex_is_matched_in_linear_time(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # 40 a's and a '!': Python's backtracking re takes 2**40 steps to give up on this line.
    evil = "a" * 40 + "!\n" + "a" * 40 + "\n"
    script(
        simulator,
        call("write_file", path="evil.txt", content=evil),
        call("search_files", pattern="(a+)+$"),
        call("search_files", pattern=r"(a)\1"),
        answer("done"),
    )

    run_id, seen = await _watched(tool_server, "regex", attacker_turn(http, "regex-attack"))

    seen.assert_unharmed()
    _, found, refused = tool_results(simulator)
    assert found == f"evil.txt:2: {'a' * 40}"
    assert refused.startswith(r"Error: '(a)\1' uses what RE2 does not support")
    await assert_run_ended(http, run_id)


async def test_fifos_block_neither_the_file_tools_nor_the_download_route(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    conversation = f"fifo-{uuid.uuid4().hex[:8]}"
    names = [f"g{n}" for n in range(1, FIFOS + 1)]
    script(
        simulator,
        call("shell", command=f"mkfifo {' '.join(names)} && echo made"),
        calls(*(("read_file", {"path": name}) for name in names)),
        answer("done"),
    )

    async def attack() -> tuple[str, list[httpx.Response], httpx.Response]:
        run_id = await attacker_turn(http, conversation)
        downloads = await asyncio.gather(
            *(http.get(f"/v1/workspaces/{conversation}/files/{name}") for name in names)
        )
        listing = await http.get(f"/v1/workspaces/{conversation}/files")
        return run_id, downloads, listing

    (run_id, downloads, listing), seen = await _watched(tool_server, "fifos", attack())

    seen.assert_unharmed()
    made, *reads = tool_results(simulator)
    assert "made" in made
    assert reads == [
        f"Error: '{name}' is not a regular file (a FIFO); the file tools read and write "
        "regular files only."
        for name in names
    ]
    assert [response.status_code for response in downloads] == [404] * FIFOS
    assert listing.json()["data"] == []
    await assert_run_ended(http, run_id)


async def test_parallel_reads_of_a_huge_file_keep_the_server_small(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    conversation = f"big-{uuid.uuid4().hex[:8]}"
    workspace = tool_server.workspace(conversation)
    workspace.mkdir(parents=True)
    line = b"2026-11-25 12:00:00 INFO request served in 12 ms by worker 7\n"
    block = line * (1024 * 1024 // len(line))
    with (workspace / "big.log").open("wb") as file:
        while file.tell() < BIG_FILE_BYTES:
            file.write(block)
    script(
        simulator,
        calls(
            *(("read_file", {"path": "big.log"}) for _ in range(6)),
            ("search_files", {"pattern": "never (in|on) this log"}),
            ("search_files", {"pattern": "worker 8$"}),
            ("edit_file", {"path": "big.log", "old_text": "INFO", "new_text": "WARN"}),
        ),
        answer("done"),
    )
    before = _rss_kb(tool_server.pid)
    peak = before
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _rss_kb(tool_server.pid))
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    try:
        run_id, seen = await _watched(tool_server, "big reads", attacker_turn(http, conversation))
    finally:
        stop.set()
        await sampler
    after = _rss_kb(tool_server.pid)
    print(f"server RSS: before {before} kB, peak {peak} kB, after {after} kB")

    seen.assert_unharmed()
    results = tool_results(simulator)
    for page in results[:6]:
        assert page.lstrip().startswith("1\t2026-11-25 12:00:00 INFO")
        assert "of a longer file" in page.splitlines()[-1]
    for search in results[6:8]:
        assert search.startswith("[search stopped early: "), search
    assert "edit_file edits files of at most" in results[8]
    assert peak - before < RSS_GROWTH_BOUND_KB, (before, peak)
    await assert_run_ended(http, run_id)
    (workspace / "big.log").unlink()
