"""What keeps one sandbox from another and from the machine: a user per workspace, cgroups
per sandbox, a sized /tmp, no user namespaces inside, no host path in sight."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from hermes_core.tools import isolation
from hermes_core.tools.sandbox import (
    SandboxLimits,
    SandboxPolicy,
    run_command,
    sandbox_unavailable_reason,
)
from hermes_core.tools.sandbox_identity import sandbox_uid

LIMITS = SandboxLimits(timeout_seconds=30, max_output_bytes=20_000, max_processes=64)
POLICY = SandboxPolicy()

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a user per workspace needs root")


@pytest.fixture(scope="module", autouse=True)
def _sandbox_here() -> None:
    reason = sandbox_unavailable_reason()
    if reason is not None:
        if os.environ.get("HERMES_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here but unavailable: {reason}")
        pytest.skip(f"no sandbox here: {reason}")


def cgroups_or_skip() -> None:
    if isolation.cgroup_host() is None:
        if os.environ.get("HERMES_REQUIRE_SANDBOX") == "1" and os.geteuid() == 0:
            pytest.fail(f"cgroups expected here: {isolation.isolation().cgroups_missing}")
        pytest.skip("no cgroups here")


async def run(command: str, workspace: Path, limits: SandboxLimits = LIMITS) -> tuple[int, str]:
    result = await run_command(
        ["/bin/bash", "-c", command], workspace=workspace, limits=limits, policy=POLICY
    )
    return result.exit_code, result.output


@needs_root
async def test_each_workspace_runs_as_a_user_of_its_own(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    _, one = await run("id -u; touch made-here", first)
    _, two = await run("id -u", second)

    assert int(one.strip().splitlines()[0]) == sandbox_uid(first.resolve())
    assert int(two.strip()) == sandbox_uid(second.resolve())
    assert one.strip() != two.strip()
    assert (first / "made-here").stat().st_uid == sandbox_uid(first.resolve())


@needs_root
async def test_a_workspace_of_another_owner_is_adopted_whole(tmp_path: Path) -> None:
    workspace = tmp_path / "old"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "notes.txt").write_text("from before")
    for path in (workspace, workspace / "sub", workspace / "sub" / "notes.txt"):
        os.chown(path, 65534, 65534)

    code, output = await run("echo more >> sub/notes.txt && cat sub/notes.txt", workspace)

    assert code == 0, output
    assert "from beforemore" in output
    assert (workspace / "sub" / "notes.txt").stat().st_uid == sandbox_uid(workspace.resolve())


async def test_no_user_namespace_can_be_made_inside(tmp_path: Path) -> None:
    code, output = await run("unshare -Ur id && echo MADE", tmp_path / "ws")

    assert code != 0
    assert "MADE" not in output


async def test_the_sandbox_shows_no_host_path(tmp_path: Path) -> None:
    workspace = tmp_path / "hidden-place"
    _, output = await run(
        "tr '\\0' ' ' < /proc/1/cmdline; echo; tr '\\0' ' ' < /proc/self/environ; echo; pwd; "
        "echo $HOME",
        workspace,
    )

    assert "hidden-place" not in output
    assert str(tmp_path) not in output
    assert "/workspace" in output


async def test_tmp_is_sized(tmp_path: Path) -> None:
    limits = SandboxLimits(timeout_seconds=30, tmp_bytes=8 * 1024**2)
    code, output = await run(
        "dd if=/dev/zero of=/tmp/big bs=1M count=32 2>&1; df -k /tmp | tail -1",
        tmp_path / "ws",
        limits,
    )

    assert "No space left on device" in output
    assert code == 0  # df ran: the command went on, only the write failed


async def test_a_sandbox_out_of_memory_is_killed_and_says_so(tmp_path: Path) -> None:
    cgroups_or_skip()
    limits = SandboxLimits(
        timeout_seconds=30, memory_bytes=2 * 1024**3, sandbox_memory_bytes=96 * 1024**2
    )
    hog = "python3 -c 'b = bytearray(400 * 1024 * 1024); print(len(b))'"
    result = await run_command(
        ["/bin/bash", "-c", hog], workspace=tmp_path / "ws", limits=limits, policy=POLICY
    )

    assert result.exit_code != 0
    assert result.out_of_memory
    assert str(400 * 1024 * 1024) not in result.output


async def test_processes_are_capped_per_sandbox_by_the_cgroup(tmp_path: Path) -> None:
    cgroups_or_skip()
    limits = SandboxLimits(timeout_seconds=30, max_processes=24)
    _, output = await run(
        "for i in $(seq 60); do sleep 2 & done 2>&1 | tail -1; wait; echo done",
        tmp_path / "ws",
        limits,
    )

    assert "fork" in output.lower() or "resource" in output.lower(), output
    assert "done" in output


async def test_a_command_runs_in_its_own_cgroup_which_is_gone_after_it(tmp_path: Path) -> None:
    cgroups_or_skip()
    host = isolation.cgroup_host()
    assert host is not None
    parent = host.parents["pids"]

    def sandboxes() -> dict[str, list[str]]:
        return {
            child.name: (child / "cgroup.procs").read_text().split()
            for child in parent.iterdir()
            if child.is_dir() and child.name.startswith("sb-")
        }

    def ours(procs: list[str]) -> bool:
        # Other test processes (make fast's workers, other suites on this machine) run
        # sandboxes of their own meanwhile: a cgroup is this command's if it holds our child.
        return any(_descends_from(int(pid), os.getpid()) for pid in procs)

    before = sandboxes()
    command = asyncio.create_task(run("sleep 1; echo slept", tmp_path / "ws"))
    deadline = time.monotonic() + 20
    while not (held := {n for n, procs in sandboxes().items() if n not in before and ours(procs)}):
        assert time.monotonic() < deadline, "no cgroup held the command"
        assert not command.done(), "the command ended outside a cgroup"
        await asyncio.sleep(0.02)
    _, output = await command

    assert "slept" in output
    assert not held & set(sandboxes())


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rpartition(")")[2].split()[1])  # the field after the state: ppid
    return False


async def test_sandboxes_have_a_total_limit(tmp_path: Path) -> None:
    cgroups_or_skip()
    host = isolation.cgroup_host()
    assert host is not None
    pids = host.parents["pids"]

    assert (pids / "pids.max").read_text().strip() != "max"
