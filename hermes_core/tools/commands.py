"""The ``shell`` and ``code`` toolsets: a command, or a Python snippet, run in the sandbox in
the conversation's workspace (see :mod:`hermes_core.tools.sandbox`).

Output is reported as the tool's progress while the command runs (``ToolProgress`` events:
a user watching a long build sees it move), and the result tells the model the exit code, how
long it took, and what was cut (output past the kept limit, a timeout, an interrupt). Stop,
interrupt and timeout kill the command and everything it started.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from hermes_core.events import ToolProgress
from hermes_core.tools.registry import ApprovalCheck, Tool, ToolContext
from hermes_core.tools.sandbox import (
    CommandResult,
    SandboxLimits,
    SandboxPolicy,
    python_executable,
    run_command,
)

MAX_COMMAND_CHARS = 100_000

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
) -> str:
    if ctx.workspace is None:
        return "Error: this conversation has no workspace: commands cannot run."
    result = await run_command(
        argv,
        workspace=ctx.workspace,
        limits=limits,
        policy=policy,
        on_output=_reporter(ctx, name),
        wall_seconds=_wall(arguments),
    )
    return describe_result(result, limits=limits)


def _timeout_schema(limits: SandboxLimits) -> dict[str, Any]:
    return {
        "type": "number",
        "description": f"Seconds before it is killed (at most {limits.timeout_seconds:g}).",
    }


def _where(policy: SandboxPolicy) -> str:
    network = "with" if policy.network else "without"
    return f"in the conversation's workspace (the current directory), {network} network access"


def shell_tool(
    *, limits: SandboxLimits, policy: SandboxPolicy, approval: str = "dangerous"
) -> Tool:
    """The ``shell`` tool: a bash command in the sandbox, under ``limits`` and ``policy``."""

    async def shell(arguments: dict[str, Any], ctx: ToolContext) -> str:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            return "Error: 'command' must be a non-empty string."
        if len(command) > MAX_COMMAND_CHARS:
            return f"Error: the command is longer than {MAX_COMMAND_CHARS} characters."
        return await _run(["/bin/bash", "-c", command], "shell", ctx, arguments, limits, policy)

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


def code_tool(*, limits: SandboxLimits, policy: SandboxPolicy, approval: str = "dangerous") -> Tool:
    """The ``code`` tool: a Python snippet in the sandbox, under ``limits`` and ``policy``."""

    async def code(arguments: dict[str, Any], ctx: ToolContext) -> str:
        source = arguments.get("code")
        if not isinstance(source, str) or not source.strip():
            return "Error: 'code' must be non-empty Python source."
        if len(source) > MAX_COMMAND_CHARS:
            return f"Error: the code is longer than {MAX_COMMAND_CHARS} characters."
        argv = [python_executable(), "-c", source]
        return await _run(argv, "code", ctx, arguments, limits, policy)

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
