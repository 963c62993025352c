"""One tenant's commands attack the machine through a real server; another tenant's chat, its
own ``shell`` and ``/health`` must not notice (see ``victims.py``), and nothing is left running.

The attacks: a fork bomb, memory (several processes that together hold more than the
sandbox's share), a full ``/tmp``, every core busy, and looks at the host through ``/proc``.
"""

from __future__ import annotations

import os
import uuid

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.plain_http import TLS_UNUSED
from tests.server.tools.conftest import (
    MODEL,
    ToolServer,
    answer,
    call,
    processes_running,
    script,
    tool_results,
    until,
)
from tests.server.tools.victims import assert_run_ended, attacker_turn, baseline, watch_victims

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


async def test_the_victims_answer_at_once_when_nobody_attacks(tool_server: ToolServer) -> None:
    # The "before" of every attack here (bench/tool_attacks.py reports both).
    seen = await baseline(tool_server)

    seen.assert_unharmed()


async def test_a_fork_bomb_starves_no_other_conversation(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    marker = f"bomb_{uuid.uuid4().hex[:8]}"
    bomb = (
        f"import os, time  # {marker}\n"
        "born = 0\n"
        "deadline = time.time() + 8\n"
        "while time.time() < deadline:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(20)\n"
        "            os._exit(0)\n"
        "        born += 1\n"
        "    except OSError:\n"
        "        time.sleep(0.01)\n"
        "print('born', born)\n"
    )
    script(simulator, call("code", code=bomb, timeout=30), answer("done"))

    run_id, seen = await watch_victims(tool_server, attacker_turn(http, "fork-bomb-2"))

    seen.assert_unharmed()
    (result,) = tool_results(simulator)
    assert int(result.split("born ", 1)[1].split()[0]) < 64  # the profile's max_processes
    assert await until(lambda: not processes_running(marker), seconds=15, server=tool_server)
    await assert_run_ended(http, run_id)


async def test_an_output_flood_past_the_time_limit_ends_the_call_and_starves_nobody(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # The call's own timeout is the limit it is told (it was told the profile's 60 s). A flood
    # stopped with the pipe full once hung the call (tests/hermes_core/tools/test_sandbox.py).
    script(simulator, call("shell", command="cat /dev/zero", timeout=3), answer("done"))

    run_id, seen = await watch_victims(tool_server, attacker_turn(http, "output-flood"))

    seen.assert_unharmed()
    (result,) = tool_results(simulator)
    assert "timed out after 3 s and was killed" in result
    await assert_run_ended(http, run_id)


async def test_memory_beyond_the_sandboxes_share_kills_only_the_sandbox(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # Four children of 200 MB each: every process is within its own address-space limit, but
    # together they are past the sandbox's 512 MB (the test profile's sandbox_memory_mb).
    hog = (
        "import os, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        block = bytearray(200 * 1024 * 1024)\n"
        "        block[::4096] = b'x' * len(block[::4096])\n"
        "        time.sleep(10)\n"
        "        os._exit(0)\n"
        "print('waited', [os.wait()[1] for _ in range(4)])\n"
    )
    script(simulator, call("code", code=hog, timeout=40), answer("done"))

    run_id, seen = await watch_victims(tool_server, attacker_turn(http, "memory-hog"))

    seen.assert_unharmed()
    (result,) = tool_results(simulator)
    assert "ran out of memory" in result
    await assert_run_ended(http, run_id)


async def test_a_full_tmp_is_the_sandboxes_own_problem(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    # Files of 50 MB each (a file is capped too, by max_file_mb and the workspace quota): the
    # sixth no longer fits the 256 MB /tmp.
    fill = "for i in $(seq 8); do head -c 50M /dev/zero > /tmp/fill$i; done; df -m /tmp | tail -1"
    script(simulator, call("shell", command=fill), answer("done"))

    run_id, seen = await watch_victims(tool_server, attacker_turn(http, "tmp-fill"))

    seen.assert_unharmed()
    (result,) = tool_results(simulator)
    assert "No space left on device" in result
    await assert_run_ended(http, run_id)


async def test_busy_cores_in_one_sandbox_leave_the_server_answering(
    tool_server: ToolServer, simulator: SimulatorServer, http: httpx.AsyncClient
) -> None:
    spin = (
        "import multiprocessing, time\n"
        "def spin():\n"
        "    end = time.time() + 6\n"
        "    while time.time() < end:\n"
        "        pass\n"
        "workers = [multiprocessing.Process(target=spin) for _ in range(4)]\n"
        "[w.start() for w in workers]\n"
        "[w.join() for w in workers]\n"
        "print('spun')\n"
    )
    script(simulator, call("code", code=spin, timeout=30), answer("done"))

    run_id, seen = await watch_victims(tool_server, attacker_turn(http, "cpu-spin"))

    seen.assert_unharmed()
    assert "spun" in tool_results(simulator)[0]
    await assert_run_ended(http, run_id)


async def test_the_sandbox_shows_neither_host_paths_nor_user_namespaces(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    look = "tr '\\0' ' ' < /proc/1/cmdline; echo; unshare -Ur id 2>&1; echo unshare=$?"
    script(simulator, call("shell", command=look), answer("done"))
    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "look"}],
        extra_headers={"x-hermes-session-id": "proc-look"},
    )

    (result,) = tool_results(simulator)
    assert str(tool_server.data_dir) not in result
    assert "unshare=0" not in result


async def test_ready_says_how_sandboxes_are_isolated(tool_server: ToolServer) -> None:
    async with httpx.AsyncClient(verify=TLS_UNUSED, base_url=tool_server.base_url) as client:
        ready = (await client.get("/ready")).json()

    sandboxes = ready["sandboxes"]
    # Either cgroups are in force, or /ready says why not: never silently neither.
    assert (sandboxes["cgroups"] is None) != (sandboxes["cgroups_missing"] is None)
    assert sandboxes["user_per_workspace"] == (os.geteuid() == 0)
    assert sandboxes["seccomp"] is True
