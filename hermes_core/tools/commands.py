"""The ``shell`` and ``code`` toolsets: a command, or a Python snippet, run in the sandbox in
the conversation's workspace (see :mod:`hermes_core.tools.sandbox`).

Output is reported as the tool's progress while the command runs (``ToolProgress`` events:
a user watching a long build sees it move), and the result tells the model the exit code, how
long it took, and what was cut (output past the kept limit, a timeout, an interrupt). Stop,
interrupt and timeout kill the command and everything it started.

Commands are held to the workspace quotas (:mod:`hermes_core.tools.quota`): one that would
start in a full workspace is refused (unless it only looks at or deletes files, so the model
can make room); one that runs gets a file-size limit no larger than the room left, and is
watched: when the workspace goes over while it runs, it is killed and the model is told why.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_core.events import ToolProgress
from hermes_core.tools.quota import WATCH_SECONDS, Usage, Verdict, WorkspaceQuota, assess
from hermes_core.tools.registry import ApprovalCheck, Tool, ToolContext
from hermes_core.tools.sandbox import (
    CommandResult,
    SandboxLimits,
    SandboxPolicy,
    python_executable,
    run_command,
)

log = logging.getLogger(__name__)

MAX_COMMAND_CHARS = 100_000
WATCH_INTERVAL = 0.5
"""Seconds between two measures of a running command's workspace, at most; less when it
grows fast and is near its quota."""
WATCH_INTERVAL_MIN = 0.02
"""The first measure comes this soon (a writer's pace is not known yet), and so do later ones
while the room left would be gone within two intervals at the pace seen."""

DANGEROUS_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\brm\s+(-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\b", "deletes files recursively"),
    (r"\bfind\b[^\n|;]*\s-delete\b", "deletes the files a search finds"),
    (r"\b(shutil\.rmtree|os\.removedirs)\b", "deletes directories"),
    (r"\b(mkfs(\.\w+)?|wipefs|shred)\b", "destroys data on a device or file"),
    (r"\bdd\b[^\n]*\bof=", "writes raw data with dd"),
    (
        r"(^|[\s;|&(])(>|>>|tee\s+(-a\s+)?)\s*/(?!workspace\b|tmp\b|dev/null\b)",
        "writes outside the workspace",
    ),
    (r"\b(curl|wget|fetch)\b[^\n|]*\|\s*(ba|z|da)?sh\b", "runs a script fetched from the network"),
    (
        r"\b(curl|wget)\b[^\n;|&]*&&[^\n]*\b(sh|bash|python3?|chmod\s+\+x)\b",
        "fetches and runs code",
    ),
    (r"\bchmod\s+-R\b|\bchown\s+-R\b", "changes permissions recursively"),
    (
        r"\b(git\s+push|git\s+reset\s+--hard|git\s+clean\s+-[a-zA-Z]*f)\b",
        "rewrites or publishes history",
    ),
    (r":\(\)\s*\{[^}]*:\|:", "is a fork bomb"),
    (r"\b(shutdown|reboot|halt|poweroff|killall|pkill)\b", "stops processes or the machine"),
    (
        r"\b(os\.system|subprocess\.(run|call|Popen|check_output|check_call))\b[^\n]*\brm\b",
        "runs rm from code",
    ),
)
"""What makes a command or snippet *dangerous* (the ``dangerous`` approval policy asks before
running one): a pattern, and why, in words the approver reads. It is a tripwire for common
mistakes, not a guarantee: the sandbox is what contains a command."""
_DANGEROUS = tuple((re.compile(pattern, re.MULTILINE), why) for pattern, why in DANGEROUS_PATTERNS)


def dangerous(text: str) -> str | None:
    """Why ``text`` (a command or a snippet) is dangerous, or None."""
    for pattern, why in _DANGEROUS:
        if pattern.search(text):
            return why
    return None


def approval_check(policy: str, field: str) -> ApprovalCheck | None:
    """The ``needs_approval`` check of an approval ``policy`` (``never``, ``dangerous``,
    ``always``) for a tool whose text to judge is its ``field`` argument."""
    if policy == "never":
        return None
    if policy == "always":
        return lambda arguments: "this profile asks before every call"

    def check(arguments: dict[str, Any]) -> str | None:
        text = arguments.get(field)
        return dangerous(text) if isinstance(text, str) else None

    return check


def describe_result(result: CommandResult, *, limits: SandboxLimits) -> str:
    """The tool result: the ending first (what the model must know), then the output."""
    if result.timed_out:
        ending = f"timed out after {limits.timeout_seconds:g} s and was killed"
    elif result.interrupted:
        ending = "stopped: the run was interrupted"
    elif result.exit_code < 0:
        ending = f"killed by signal {-result.exit_code}"
    else:
        ending = f"exit code {result.exit_code}"
    lines = [f"[{ending}; {result.duration_s:.1f} s]"]
    if result.output:
        lines.append(result.output.rstrip("\n"))
    else:
        lines.append("[no output]")
    if result.truncated:
        lines.append(
            f"[output cut: {result.output_bytes} bytes written, the first "
            f"{limits.max_output_bytes} shown; write long output to a file and read it]"
        )
    if result.out_of_memory:
        lines.append(
            f"[the sandbox ran out of memory ({limits.sandbox_memory_bytes // 2**20} MB for all "
            "its processes and /tmp together): the kernel killed a process; use less memory, "
            "e.g. process the data in chunks]"
        )
    return "\n".join(lines)


def _reporter(ctx: ToolContext, name: str) -> Callable[[str], None]:
    def report(output: str) -> None:
        ctx.emit(ToolProgress, call_id=ctx.call_id, name=name, output=output)

    return report


async def _run(
    argv: list[str],
    name: str,
    ctx: ToolContext,
    arguments: dict[str, Any],
    limits: SandboxLimits,
    policy: SandboxPolicy,
    quota: WorkspaceQuota,
    *,
    frees_space: bool = False,
) -> str:
    if ctx.workspace is None:
        return "Error: this conversation has no workspace: commands cannot run."
    workspace = ctx.workspace
    before = await asyncio.to_thread(assess, workspace, quota)
    if before.full and not frees_space:
        return (
            f"[refused: {before.problem}; delete files to go on (commands that only list or "
            "delete files, such as rm, still run)]"
        )
    # One file can never take more than the room left; the watcher stops many files.
    capped = dataclasses.replace(
        limits, max_file_bytes=max(0, min(limits.max_file_bytes, before.room))
    )
    seen = _SeenOutput(limits.max_output_bytes, _reporter(ctx, name))
    started = time.monotonic()
    command = asyncio.create_task(
        run_command(
            argv,
            workspace=workspace,
            limits=capped,
            policy=policy,
            on_output=seen.add,
            wall_seconds=_wall(arguments),
            skill_folders=ctx.skill_folders,
        )
    )
    watcher = asyncio.create_task(_watch(workspace, quota, before.usage))
    try:
        await asyncio.wait({command, watcher}, return_when=asyncio.FIRST_COMPLETED)
        problem = watcher.result() if watcher.done() else None
        if problem is None:
            result = await command
        else:
            command.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await command
            return _killed(problem, seen, time.monotonic() - started)
    finally:
        watcher.cancel()
        if not command.done():  # we were cancelled: the command dies with us
            command.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await command
    # The call's own timeout, when it asked for a shorter one, is the limit it ran under.
    wall = min(_wall(arguments) or limits.timeout_seconds, limits.timeout_seconds)
    text = describe_result(result, limits=dataclasses.replace(limits, timeout_seconds=wall))
    after = await asyncio.to_thread(assess, workspace, quota, budget_s=WATCH_SECONDS)
    if after.full and _grew(before.usage, after.usage):
        text += f"\n[{after.problem}; delete files to go on]"
    return text


async def _watch(workspace: Path, quota: WorkspaceQuota, start: Usage) -> str | None:
    """Why the command must stop, once its workspace went over a quota while it grew; None
    if the workspace cannot be measured (the command then runs on, under its limits)."""
    interval, last, last_at = WATCH_INTERVAL_MIN, start.bytes, time.monotonic()
    try:
        while True:
            await asyncio.sleep(interval)
            verdict = await asyncio.to_thread(assess, workspace, quota, budget_s=WATCH_SECONDS)
            if verdict.full and _grew(start, verdict.usage):
                return verdict.problem
            now = time.monotonic()
            grown = verdict.usage.bytes - last
            interval = _next_interval(verdict, grown, now - last_at, interval)
            last, last_at = verdict.usage.bytes, now
    except OSError:
        log.exception("could not measure the workspace of a running command")
        return None


def _next_interval(verdict: Verdict, grown: int, elapsed: float, previous: float) -> float:
    """Sooner when, at the pace just seen, the room left would be gone within two intervals
    (how far past its quota a fast writer gets is what it writes in one interval); while the
    workspace does not grow, twice the last interval, up to ``WATCH_INTERVAL``."""
    if grown <= 0 or elapsed <= 0:
        return min(WATCH_INTERVAL, previous * 2)
    seconds_to_full = max(verdict.room, 0) / (grown / elapsed)
    return min(WATCH_INTERVAL, max(WATCH_INTERVAL_MIN, seconds_to_full / 2))


def _grew(before: Usage, after: Usage) -> bool:
    return after.bytes > before.bytes or after.files > before.files


def _killed(problem: str, seen: _SeenOutput, duration: float) -> str:
    lines = [f"[killed: {problem}; delete files to go on; {duration:.1f} s]"]
    lines.append(seen.text().rstrip("\n") or "[no output]")
    return "\n".join(lines)


class _SeenOutput:
    """The output a command reported while it ran: what the model is shown of a command
    that was killed (its result, with the full output, is lost with it)."""

    def __init__(self, keep: int, report: Callable[[str], None]) -> None:
        self._keep = keep
        self._kept: list[str] = []
        self._size = 0
        self._report = report

    def add(self, output: str) -> None:
        self._report(output)
        if self._size < self._keep:
            self._kept.append(output[: self._keep - self._size])
            self._size += len(self._kept[-1])

    def text(self) -> str:
        return "".join(self._kept)


_LOOKS_OR_DELETES = re.compile(
    r"^\s*(?:rm|rmdir|unlink|truncate|ls|du|df|pwd|cd|find|stat|wc|echo|true)(?:\s|$)"
)


def only_looks_or_deletes(command: str) -> bool:
    """The command does nothing but list, measure or delete files (what a model does to make
    room in a full workspace): it may run there, under a file-size limit of zero."""
    if any(token in command for token in (">", "$(", "`", "<(", "-exec", "-fprint", "-fls")):
        return False
    segments = re.split(r"&&|\|\||[;|\n]", command)
    return all(not s.strip() or _LOOKS_OR_DELETES.match(s) for s in segments)


def _timeout_schema(limits: SandboxLimits) -> dict[str, Any]:
    return {
        "type": "number",
        "description": f"Seconds before it is killed (at most {limits.timeout_seconds:g}).",
    }


def _where(policy: SandboxPolicy) -> str:
    network = "with" if policy.network else "without"
    return f"in the conversation's workspace (the current directory), {network} network access"


def shell_tool(
    *,
    limits: SandboxLimits,
    policy: SandboxPolicy,
    approval: str = "dangerous",
    quota: WorkspaceQuota | None = None,
) -> Tool:
    """The ``shell`` tool: a bash command in the sandbox, under ``limits``, ``policy`` and
    ``quota``."""
    held_to = quota or WorkspaceQuota()

    async def shell(arguments: dict[str, Any], ctx: ToolContext) -> str:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return "Error: 'command' must be a non-empty string."
        if len(command) > MAX_COMMAND_CHARS:
            return f"Error: the command is longer than {MAX_COMMAND_CHARS} characters."
        argv = ["/bin/bash", "-c", command]
        frees = only_looks_or_deletes(command)
        return await _run(argv, "shell", ctx, arguments, limits, policy, held_to, frees_space=frees)

    return Tool(
        name="shell",
        toolset="shell",
        description=(
            f"Run a bash command {_where(policy)}. Its output (stdout and stderr) and exit "
            "code come back; long output is cut, so write it to a file and read the file."
        ),
        parameters={
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": _timeout_schema(limits)},
            "required": ["command"],
        },
        handler=shell,
        concurrent_safe=False,
        cancellable=True,
        needs_approval=approval_check(approval, "command"),
        summarize=lambda args: f"shell {str(args.get('command', ''))[:80]}",
    )


def code_tool(
    *,
    limits: SandboxLimits,
    policy: SandboxPolicy,
    approval: str = "dangerous",
    quota: WorkspaceQuota | None = None,
) -> Tool:
    """The ``code`` tool: a Python snippet in the sandbox, under ``limits``, ``policy`` and
    ``quota``."""
    held_to = quota or WorkspaceQuota()

    async def code(arguments: dict[str, Any], ctx: ToolContext) -> str:
        source = arguments.get("code")
        if not isinstance(source, str) or not source.strip():
            return "Error: 'code' must be non-empty Python source."
        if len(source) > MAX_COMMAND_CHARS:
            return f"Error: the code is longer than {MAX_COMMAND_CHARS} characters."
        argv = [python_executable(policy), "-c", source]
        return await _run(argv, "code", ctx, arguments, limits, policy, held_to)

    return Tool(
        name="code",
        toolset="code",
        description=(
            f"Run a Python 3 snippet {_where(policy)}; print what you want to see. Files it "
            "writes stay in the workspace for the next steps."
        ),
        parameters={
            "type": "object",
            "properties": {"code": {"type": "string"}, "timeout": _timeout_schema(limits)},
            "required": ["code"],
        },
        handler=code,
        concurrent_safe=False,
        cancellable=True,
        needs_approval=approval_check(approval, "code"),
        summarize=lambda args: f"code {_first_line(args.get('code'))}",
    )


def _wall(arguments: dict[str, Any]) -> float | None:
    value = arguments.get("timeout")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _first_line(source: object) -> str:
    text = source if isinstance(source, str) else ""
    line = next((line for line in text.splitlines() if line.strip()), "")
    return line.strip()[:80]
