"""Human-readable progress: the one line each tool step, status change or fallback shows.

Both views write these lines where a UI shows thinking (Chat: ``delta.reasoning_content``;
Responses: a ``reasoning`` item's summary), never into the answer. They are pure functions, so
the two endpoints word a run's progress identically. Every line ends with ``\\n``: readers that
join the pieces without a separator still get one step per line.

For Open WebUI the same steps are worded as bare phrases for its status lines (``…_status``,
``…_text``; ``openwebui_status.py`` picks them) and its tool cards (``card_…``).
"""

from __future__ import annotations

import json
from typing import Any

from hermes_core.events import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    CompressionPerformed,
    ExitReason,
    FallbackActivated,
    PlanMade,
    RetryScheduled,
    RunFinished,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from server.views.hosted_tools import command_failure

StatusEvent = RetryScheduled | BudgetWarning | CompressionPerformed
"""The events shown as one status line."""

ERROR_PREFIX = "Error:"
"""How a failed tool's output starts (what the tools themselves write; Open WebUI draws such a
card as failed)."""
UNFINISHED_TOOL_OUTPUT = "Error: the run ended before this tool finished."
"""The output of a tool card whose tool was still running when the run ended."""
COMMAND_TOOLS = frozenset({"shell", "code"})
"""The tools whose result is a command's report, starting with how it ended."""


def failed_command(event: ToolFinished) -> str | None:
    """How a ``shell`` / ``code`` command that ran and did not succeed ended (``exit code 2``,
    ``killed by signal 9``, ``timed out``), else None.

    The call itself succeeded (``outcome`` stays ``success``: the model reads the output and
    the exit code, and a ``grep`` that found nothing is no broken tool), but a person sees a
    failed command, as in a terminal: its line, status and Open WebUI card say failed."""
    if not event.ok or event.name not in COMMAND_TOOLS:
        return None
    return command_failure(event.result_preview)


def subagent_prefix(child_index: int) -> str:
    """Indents a sub-agent's lines under its parent's and numbers the child from 1."""
    return f"  ↳ [{child_index + 1}] "


def duration_ms(event: ToolFinished) -> int:
    return round(event.duration_s * 1000)


def tool_started_line(event: ToolStarted, *, prefix: str = "") -> str:
    """``→ read_file README.md``"""
    return f"{prefix}→ {event.summary}\n"


def tool_finished_line(event: ToolFinished, *, prefix: str = "") -> str:
    """``✓ read_file (12 ms)`` or ``✗ read_file (12 ms): why``"""
    millis = duration_ms(event)
    failure = failed_command(event)
    if event.ok and failure is None:
        return f"{prefix}✓ {event.name} ({millis} ms)\n"
    return f"{prefix}✗ {event.name} ({millis} ms): {failure or event.error or 'failed'}\n"


def tool_output_text(event: ToolFinished) -> str:
    """What a tool card shows as the tool's output: JSON laid out for reading, and a
    marker where the preview is cut (never a silent cut mid-JSON)."""
    if not event.ok:
        # A tool that failed usually says so itself ("Error: no such file…"): the card must
        # not read "Error: Error: …".
        error = event.error or "failed"
        return error if error.startswith(ERROR_PREFIX) else f"{ERROR_PREFIX} {error}"
    text = event.result_preview
    left = event.result_chars - len(text)
    if left <= 0 and text[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    if left > 0:
        return f"{text}\n… [{left} more characters not shown]"
    return text


def tool_progress(event: ToolStarted | ToolProgress | ToolFinished) -> dict[str, Any]:
    """The structured form of a tool step (without a ``type``: each view names its own)."""
    if isinstance(event, ToolStarted):
        return {
            "phase": "started",
            "call_id": event.call_id,
            "name": event.name,
            "arguments": event.arguments,
        }
    if isinstance(event, ToolProgress):
        return {
            "phase": "progress",
            "call_id": event.call_id,
            "name": event.name,
            "output": event.output,
        }
    return {
        "phase": "finished",
        "call_id": event.call_id,
        "name": event.name,
        "ok": event.ok,
        "outcome": event.outcome.value,
        "duration_ms": duration_ms(event),
        "preview": event.result_preview,
        "error": event.error,
    }


def progress_status(event: ToolProgress) -> str | None:
    """A running tool's latest output as one status line (its last non-empty line, cut), or
    None when it wrote no words. It says what the tool wrote, never that it runs: after a
    stop it may be the last line left on screen."""
    lines = [line.strip() for line in event.output.splitlines() if line.strip()]
    return f"{event.name}: {lines[-1][:120]}" if lines else None


def tool_started_status(event: ToolStarted, *, prefix: str = "") -> str:
    """``shell ls -la`` / ``↳ [1] read_file README.md``: the step, as a fact (no "running")."""
    lead = f"{prefix.strip()} " if prefix else ""
    return f"{lead}{event.summary}"


def status_text(event: StatusEvent) -> str:
    """The status as a bare phrase (Open WebUI's status lines show it without decoration)."""
    if isinstance(event, RetryScheduled):
        return f"{event.provider} failed ({event.reason}); retrying in {event.delay_s:.1f} s"
    if isinstance(event, BudgetWarning):
        return f"Iteration budget: {event.used}/{event.total} used"
    return f"Context compressed: {event.tokens_before} → {event.tokens_after} tokens"


def status_line(event: StatusEvent) -> str:
    """``· Iteration budget: 8/10 used``"""
    return f"· {status_text(event)}\n"


def fallback_text(event: FallbackActivated) -> str:
    """``openai failed (rate_limit); continuing on anthropic``"""
    return f"{event.from_provider} failed ({event.reason}); continuing on {event.to_provider}"


def fallback_line(event: FallbackActivated) -> str:
    """``↪ openai failed (rate_limit); continuing on anthropic``"""
    return f"↪ {fallback_text(event)}\n"


def plan_heading(event: PlanMade) -> str:
    """``Plan`` or ``Plan revised (2 of 3 tool calls since the plan failed)``"""
    if not event.replanned:
        return "Plan"
    return f"Plan revised ({event.reason})" if event.reason else "Plan revised"


def plan_lines(event: PlanMade) -> str:
    """The plan as a block of reasoning: ``Plan:`` and one numbered line per step."""
    steps = "".join(f"{number}. {step}\n" for number, step in enumerate(event.steps, start=1))
    return f"{plan_heading(event)}:\n{steps}"


def plan_status(event: PlanMade) -> list[str]:
    """Open WebUI's status lines for a plan: ``Plan: 3 steps``, then one line per step."""
    noun = "step" if len(event.steps) == 1 else "steps"
    heading = f"{plan_heading(event)}: {len(event.steps)} {noun}"
    return [heading, *(f"{n}. {step}" for n, step in enumerate(event.steps, start=1))]


def plan_progress(event: PlanMade) -> dict[str, Any]:
    """The structured form of a plan (without a ``type``)."""
    return {"steps": list(event.steps), "replanned": event.replanned, "reason": event.reason}


def approval_progress(event: ApprovalRequested | ApprovalResolved) -> dict[str, Any]:
    """The structured form of an approval step (without a ``type``)."""
    if isinstance(event, ApprovalRequested):
        return {
            "phase": "requested",
            "approval_id": event.approval_id,
            "call_id": event.call_id,
            "name": event.name,
            "arguments": event.arguments,
            "reason": event.reason,
        }
    return {
        "phase": "resolved",
        "approval_id": event.approval_id,
        "call_id": event.call_id,
        "name": event.name,
        "decision": event.decision.value,
    }


def approval_text(event: ApprovalRequested | ApprovalResolved) -> str:
    """``shell needs approval (deletes files recursively)`` / ``shell: approved``"""
    if isinstance(event, ApprovalRequested):
        return f"{event.name} needs approval ({event.reason})"
    return f"{event.name}: {event.decision.value}"


def approval_line(event: ApprovalRequested | ApprovalResolved) -> str:
    """``? shell needs approval (…)`` or ``· shell: approved``"""
    mark = "?" if isinstance(event, ApprovalRequested) else "·"
    return f"{mark} {approval_text(event)}\n"


def approval_status(event: ApprovalRequested | ApprovalResolved) -> str:
    """Open WebUI's status line for an approval step: the question and how to answer it, or
    what was decided."""
    if isinstance(event, ApprovalRequested):
        return f"{event.name} needs your approval: {event.reason} — reply approve or deny"
    if event.decision is ApprovalDecision.APPROVED:
        return f"{event.name} approved by the user"
    if event.decision is ApprovalDecision.DENIED:
        return f"{event.name} denied by the user: it did not run"
    return f"{event.name} was not approved in time: it did not run"


def awaiting_approval_status(asks: list[ApprovalRequested]) -> str:
    """The last status line of a run that ends with its question to the user."""
    if len(asks) == 1:
        return approval_status(asks[0])
    return f"{len(asks)} tool calls need your approval — reply approve or deny"


def tool_status_text(event: ToolFinished, *, prefix: str = "") -> str:
    """``read_file done`` / ``shell cancelled`` / ``shell failed``: a finished step's status."""
    lead = f"{prefix.strip()} " if prefix else ""
    if (failure := failed_command(event)) is not None:
        return f"{lead}{event.name} failed: {failure}"
    if event.ok:
        return f"{lead}{event.name} done"
    if event.outcome is ToolOutcome.CANCELLED:
        return f"{lead}{event.name} cancelled"
    if event.outcome is ToolOutcome.DENIED:
        return f"{lead}{event.name} denied: it did not run"
    return f"{lead}{event.name} failed"


AWAITING_APPROVAL_OUTPUT = "Not run yet: it waits for your approval. Reply approve or deny."
"""A tool card's output while its call waits for the user's answer (never ``Error:``, which
Open WebUI draws as a failure)."""


def card_output_text(event: ToolFinished) -> str:
    """A tool card's output: the tool's, or what became of a call that did not run."""
    if event.outcome is ToolOutcome.AWAITING_APPROVAL:
        return AWAITING_APPROVAL_OUTPUT
    if event.outcome is ToolOutcome.DENIED:
        return event.error or "Denied: it did not run."
    return tool_output_text(event)


def card_arguments(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool card's input. Open WebUI labels a ``delegate_task`` card with its ``task``
    argument (``Sub-agent: "<task>"``), which our schema calls ``goal`` (or ``tasks``, each
    with a ``goal``): the card gets the goals as ``task``, the other arguments after it."""
    if name != "delegate_task":
        return arguments
    goals = [arguments.get("goal")]
    tasks = arguments.get("tasks")
    if isinstance(tasks, list) and tasks:
        goals = [t.get("goal") if isinstance(t, dict) else None for t in tasks]
    said = [" ".join(g.split()) for g in goals if isinstance(g, str) and g.strip()]
    if not said:
        return arguments
    task = said[0] if len(said) == 1 else " | ".join(f"{i}) {g}" for i, g in enumerate(said, 1))
    rest = {key: value for key, value in arguments.items() if key != "goal"}
    return {"task": task, **rest}


_ENDINGS = {
    ExitReason.COMPLETED: "Done",
    ExitReason.INTERRUPTED: "Stopped",
    ExitReason.BUDGET_EXHAUSTED: "Stopped: the step budget is used up",
    ExitReason.TRUNCATED: "Stopped: the answer hit the output limit",
    ExitReason.AWAITING_APPROVAL: "Waiting for your approval",
    ExitReason.AWAITING_CLIENT_TOOLS: "Waiting for tool results",
}


def ending_status_text(event: RunFinished) -> str:
    """The last status line of a run: how it ended."""
    if event.exit_reason is ExitReason.FAILED:
        return f"Failed: {event.error or 'see the server log'}"[:200]
    if event.exit_reason is ExitReason.BUDGET_EXHAUSTED and event.error:
        # The step budget, a cost cap or a key's budget: its error says which.
        return f"Stopped: {event.error}"[:200]
    return _ENDINGS.get(event.exit_reason, event.exit_reason.value)
