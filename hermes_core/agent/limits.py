"""What a run does at its limits: out of iterations, and out of tool calls.

Out of iterations, a run that has tool results the model has not yet spoken about makes one
tool-less grace call for a final answer (:func:`budget_exhausted`). Out of the request's
``max_tool_calls``, calls beyond it are answered with an error instead of run
(:func:`within_tool_limit`), and the next model call is asked for an answer without tools.
These rules cut across the loop's steps, so they are kept together here, with the words the
model is told.
"""

from __future__ import annotations

import dataclasses

from hermes_core.agent.model_step import ModelStep
from hermes_core.agent.run_state import ActiveRun
from hermes_core.events import ExitReason, ToolOutcome
from hermes_core.messages import text_of
from hermes_core.tools.executor import PlannedCall

TOOL_LIMIT_RESULT = (
    "Error: this request may make at most {limit} tool call(s) and they are used up; "
    "answer with what you have."
)
TOOL_LIMIT_REQUEST = (
    "You have made every tool call this request allows, so you cannot call tools any more. "
    "Reply now with your final answer based on what you found."
)
GRACE_REQUEST = (
    "You have used every iteration of your budget, so you cannot call tools any more. Reply "
    "now with your final answer: summarise what you did, what you found, and what is left."
)


def tool_calls_used_up(run: ActiveRun) -> bool:
    limit = run.request.max_tool_calls
    return limit is not None and run.state.tool_calls >= limit


def within_tool_limit(run: ActiveRun, calls: list[PlannedCall]) -> list[PlannedCall]:
    """Count the calls that will run; answer those beyond ``max_tool_calls`` with an error."""
    limit = run.request.max_tool_calls
    kept: list[PlannedCall] = []
    for call in calls:
        if call.preset_result is None:
            if limit is not None and run.state.tool_calls >= limit:
                call = dataclasses.replace(
                    call,
                    tool=None,
                    preset_result=TOOL_LIMIT_RESULT.format(limit=limit),
                    preset_outcome=ToolOutcome.LIMIT,
                )
            else:
                run.state.tool_calls += 1
        kept.append(call)
    return kept


async def budget_exhausted(run: ActiveRun, model: ModelStep) -> None:
    """Out of iterations: one tool-less grace call if the model has not yet spoken."""
    if run.last_role() != "tool":
        last = run.state.transcript[-1] if run.state.transcript else None
        text = text_of(last.get("content")) if last and last["role"] == "assistant" else ""
        return run.finish(ExitReason.BUDGET_EXHAUSTED, text, error=_budget_error(run))
    outcome = await model.call(tools_allowed=False, closing_note=GRACE_REQUEST, grace=True)
    if outcome is None:
        return None
    assert outcome.response is not None
    text = text_of(outcome.response.message.get("content")) or outcome.streamed_text
    if text.strip():
        run.append({"role": "assistant", "content": text})
    return run.finish(ExitReason.BUDGET_EXHAUSTED, text, error=_budget_error(run))


def _budget_error(run: ActiveRun) -> str:
    return f"The iteration budget ({run.budget.max_total}) is exhausted."
