"""The planner: a complex task gets a written plan before the first action, and a new one when
too many of the tool calls since the last plan failed (a profile's ``planner: true``).

A plan is one model call of its own, offered no tools and asked for a numbered list of steps,
or ``NO PLAN`` when the task needs two steps or fewer (most requests: a question, one lookup).
A plan of two steps or more is said (:class:`~hermes_core.events.PlanMade`), becomes the
session's todo list, and enters the transcript as the model's own ``todo`` call and its result:
every later call sees the plan as something it wrote, in a shape every provider accepts (a
tool call and its answer), and the stored session keeps it.

Replanning watches the tool calls since the last plan: after a batch in which, of at least
:data:`REPLAN_MIN_CALLS` calls, more than :data:`REPLAN_FAILED_SHARE` failed, the model is told
so and asked for a revised plan. A run replans at most :data:`MAX_REPLANS` times.

Planning is a model call like any other to the run (usage, ``model_calls``, one iteration of
the budget); it is made only when the budget can pay for it and still leave a step to act.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from secrets import token_hex

from hermes_core.agent.model_step import ModelStep
from hermes_core.agent.run_state import ActiveRun
from hermes_core.events import PlanMade, ToolOutcome
from hermes_core.messages import ToolCall, text_of
from hermes_core.stores import TodoItem
from hermes_core.tools.executor import TOOL_ERROR_PREFIX, CallResult
from hermes_core.tools.todo import TODO_STATUSES

PLAN_REQUEST = (
    "Before you act, plan. If this task needs more than two steps, reply with only a numbered "
    "list of the steps you will take, one short line each (at most {max_steps}). If it needs "
    "two steps or fewer, reply with exactly NO PLAN. Do not answer the task yet."
)
REPLAN_REQUEST = (
    "{failed} of the {total} tool calls since your plan failed. Rethink the rest of the task: "
    "reply with only a numbered list of the revised steps, one short line each (at most "
    "{max_steps}), or with exactly NO PLAN if what is left needs two steps or fewer. Do not "
    "answer the task yet."
)
NO_PLAN = "NO PLAN"
MAX_STEPS = 12
MAX_STEP_CHARS = 200
MAX_REPLANS = 3
REPLAN_MIN_CALLS = 3
REPLAN_FAILED_SHARE = 0.3
"""Replan when more than this share of the calls since the plan failed."""

# "1. step", "1) step", "(1) step", "- step", "* step", "• step", "Step 1: step"
_MARKER = re.compile(r"^(\s*)(?:\(?\d{1,2}[.):]|[-*•+]|step\s+\d{1,2}\s*[.):-]?)\s+(.*)$", re.I)
# A call is not a failure when it has not run yet: it waits for a person's answer.
_NOT_FAILED = frozenset({ToolOutcome.SUCCESS, ToolOutcome.AWAITING_APPROVAL})


def _failed(result: CallResult) -> bool:
    """A call failed when it ended so: it raised, timed out, was refused, or its tool said so
    in its answer (an ``Error: …`` result, which the executor counts as an error too; a
    result preset before the call ran, such as an unparsable call's, is checked here)."""
    return result.outcome not in _NOT_FAILED or result.content.startswith(TOOL_ERROR_PREFIX)


def parse_plan(text: str) -> list[str]:
    """The steps of a planner's reply: its list items (numbered or bulleted, in any of the
    usual ways; details indented under an item are not steps), without markup, at most
    :data:`MAX_STEPS` of at most :data:`MAX_STEP_CHARS` characters. Empty for ``NO PLAN`` and
    for a reply that is no list (prose is not a plan)."""
    if text.strip().upper().startswith(NO_PLAN):
        return []
    items = [(len(m.group(1)), m.group(2)) for m in map(_MARKER.match, text.splitlines()) if m]
    if not items:
        return []
    outermost = min(indent for indent, _ in items)
    steps: list[str] = []
    for indent, raw in items:
        step = raw.replace("**", "").replace("__", "").strip().strip("`").strip()
        if indent != outermost or not step:
            continue
        if len(step) > MAX_STEP_CHARS:
            step = step[: MAX_STEP_CHARS - 1].rstrip() + "…"
        steps.append(step)
        if len(steps) == MAX_STEPS:
            break
    return steps


class Planner:
    """One run's planner: whether it plans, what it counts since the last plan, its replans."""

    def __init__(self, run: ActiveRun, model: ModelStep) -> None:
        self.run = run
        self.model = model
        self.calls = 0
        """Tool calls answered since the last plan (or the run's start)."""
        self.failed = 0
        """Of those, the ones that failed."""
        self.replans = 0

    # --- the first plan ---------------------------------------------------------------------

    def wanted(self) -> bool:
        """A run plans when it starts on a new message with tools to act with; not when it
        only carries on (answered approvals, a client's tool results) or cannot act."""
        request = self.run.request
        return (
            not request.approvals
            and request.offer_tools
            and request.tool_choice != "none"
            and request.max_tool_calls != 0
            and self._on_a_new_message()
        )

    def _on_a_new_message(self) -> bool:
        """The transcript ends on the user's message (the server passes it as the history's
        last; a recalled note, a system message, may follow it)."""
        for message in reversed(self.run.state.transcript):
            if message["role"] != "system":
                return bool(message["role"] == "user")
        return False

    async def plan(self) -> bool:
        """Ask for a plan and record it. False: the run has finished (the call failed)."""
        return await self._ask(PLAN_REQUEST.format(max_steps=MAX_STEPS), reason=None)

    # --- replanning -------------------------------------------------------------------------

    def count(self, results: Sequence[CallResult]) -> None:
        """Count a batch of tool results toward the share that failed."""
        self.calls += len(results)
        self.failed += sum(_failed(result) for result in results)

    async def after_tools(self) -> bool:
        """After a batch of tool calls: replan if too many failed. False: the run finished."""
        if (
            self.calls < REPLAN_MIN_CALLS
            or self.failed <= REPLAN_FAILED_SHARE * self.calls
            or self.replans >= MAX_REPLANS
        ):
            return True
        self.replans += 1
        failed, total = self.failed, self.calls
        note = REPLAN_REQUEST.format(failed=failed, total=total, max_steps=MAX_STEPS)
        return await self._ask(note, reason=f"{failed} of {total} tool calls since the plan failed")

    # --- both -------------------------------------------------------------------------------

    async def _ask(self, note: str, *, reason: str | None) -> bool:
        run = self.run
        # Counted from here whatever the answer: no second plan until new calls have run.
        self.calls = self.failed = 0
        # The plan's call and at least one step to act on it, or no plan at all.
        if run.budget.remaining < 2 or not run.budget.consume():
            return True
        run.state.iterations += 1
        outcome = await self.model.call(tools_allowed=False, closing_note=note, planning=True)
        if outcome is None:
            return False
        assert outcome.response is not None
        text = text_of(outcome.response.message.get("content")) or outcome.streamed_text
        steps = parse_plan(text)
        if len(steps) < 2:
            return True
        run.emit(PlanMade, steps=steps, replanned=reason is not None, reason=reason)
        await self._record(steps)
        return True

    async def _record(self, steps: list[str]) -> None:
        """The plan becomes the session's todo list, and enters the transcript as the model's
        own ``todo`` call (the tool's arguments) and its answer (the tool's report)."""
        run = self.run
        items = [TodoItem(id=str(n), content=step) for n, step in enumerate(steps, start=1)]
        await run.agent.todo_store.save(run.request.session_id or run.task_id, items)
        todos = [{"id": i.id, "content": i.content, "status": i.status} for i in items]
        call: ToolCall = {
            "id": f"call_plan_{token_hex(6)}",
            "type": "function",
            "function": {
                "name": "todo",
                "arguments": json.dumps({"todos": todos, "merge": False}, ensure_ascii=False),
            },
        }
        run.append({"role": "assistant", "content": None, "tool_calls": [call]})
        # What the todo tool answers a write with: the list and its counts.
        counts = {status: sum(i.status == status for i in items) for status in TODO_STATUSES}
        report = {"todos": todos, "counts": counts, "total": len(items)}
        run.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": json.dumps(report, ensure_ascii=False),
            }
        )
