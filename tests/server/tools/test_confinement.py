"""What a run's tools cannot do, shown through a real server: the sandbox refuses the network,
writes outside the workspace and secrets reached through symlinks, and keeps a fork bomb
bounded; the file tools refuse paths that leave the workspace."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import (
    KEY,
    MODEL,
    ToolServer,
    answer,
    call,
    processes_running,
    script,
    tool_results,
    until,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


async def _run(openai: AsyncOpenAI, conversation: str) -> None:
    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "try it"}],
        extra_headers={"x-hermes-session-id": conversation},
    )
    assert completion.choices[0].message.content == "done"


async def test_the_sandbox_has_no_network_not_even_the_servers_own_port(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    port = tool_server.base_url.rsplit(":", 1)[1]
    probe = (
        "import socket\n"
        f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=3).close()\n"
        "        print('reached', host)\n"
        "    except OSError as exc:\n"
        "        print('refused', host, type(exc).__name__)\n"
    )
    script(simulator, call("code", code=probe), answer("done"))
    await _run(openai, "no-network")

    (result,) = tool_results(simulator)
    assert "reached" not in result
    assert "refused 127.0.0.1" in result
    assert "refused 1.1.1.1" in result


async def test_the_sandbox_refuses_writes_outside_the_workspace(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    name = f"escape-{uuid.uuid4().hex[:8]}"
    targets = ["/etc", "/usr/local", "/var/tmp", str(tool_server.data_dir)]
    probe = (
        "for where in " + repr(targets) + ":\n"
        "    try:\n"
        f"        open(where + '/{name}', 'w').write('x')\n"
        "        print('wrote', where)\n"
        "    except OSError as exc:\n"
        "        print('refused', where, exc.strerror)\n"
        f"open('{name}', 'w').write('inside')\n"
        "print('wrote the workspace')\n"
    )
    script(simulator, call("code", code=probe), answer("done"))
    await _run(openai, "no-writes-outside")

    (result,) = tool_results(simulator)
    assert "wrote the workspace" in result
    for target in targets:
        assert f"refused {target}" in result
        assert not (Path(target) / name).exists()
    assert (tool_server.workspace("no-writes-outside") / name).read_text() == "inside"


async def test_symlinks_in_the_sandbox_reach_no_secret(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    workspace = tool_server.workspace("secret-links")
    workspace.mkdir(parents=True, exist_ok=True)
    # A link planted beside the agent, pointing at the server's own config (it holds the keys).
    (workspace / "config-link").symlink_to(tool_server.data_dir / "hermes.yaml")
    script(
        simulator,
        call("shell", command="ln -s /etc/shadow shadow-link; cat shadow-link; cat config-link"),
        answer("done"),
    )
    await _run(openai, "secret-links")

    (result,) = tool_results(simulator)
    assert not result.startswith("[exit code 0;")
    assert "root:" not in result
    assert KEY not in result
    assert "Permission denied" in result or "No such file" in result


async def test_a_fork_bomb_in_the_sandbox_stays_bounded_and_leaves_nothing(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    marker = f"bomb_{uuid.uuid4().hex[:8]}"
    bomb = (
        f"import os, time  # {marker}\n"
        "born = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        born += 1\n"
        "except OSError as exc:\n"
        "    print('refused after', born, exc.strerror)\n"
    )
    script(simulator, call("code", code=bomb, timeout=20), answer("done"))
    await _run(openai, "fork-bomb")

    (result,) = tool_results(simulator)
    assert "refused after" in result
    born = int(result.split("refused after ", 1)[1].split()[0])
    assert born < 64  # the profile's max_processes
    # The command's children die with it: its sandbox's PID namespace is gone.
    assert await until(lambda: not processes_running(marker), seconds=15, server=tool_server)
    assert tool_server.alive()


async def test_the_file_tools_refuse_paths_that_leave_the_workspace(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    workspace = tool_server.workspace("file-escapes")
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "config-link").symlink_to(tool_server.data_dir / "hermes.yaml")
    (workspace / "up").symlink_to(tool_server.data_dir)
    script(
        simulator,
        call("read_file", path="../../../hermes.yaml"),
        call("read_file", path="/etc/passwd"),
        call("read_file", path="config-link"),
        call("write_file", path="up/planted.txt", content="x"),
        call("write_file", path="../planted.txt", content="x"),
        call("list_files", path="up"),
        answer("done"),
    )
    await _run(openai, "file-escapes")

    results = tool_results(simulator)
    assert len(results) == 6
    for result in results:
        assert result.startswith("Error"), result
        assert "workspace" in result, result
        assert KEY not in result
    assert not (tool_server.data_dir / "planted.txt").exists()
    assert not (workspace.parent / "planted.txt").exists()
