"""What a run does at its limits: out of iterations, and out of tool calls.

Out of iterations, a run that has tool results the model has not yet spoken about makes one
tool-less grace call for a final answer (:func:`budget_exhausted`); a run that ends there with
no text to show (the grace reply called tools anyway, or said nothing) ends on a notice that says
so instead of an empty answer. Out of the request's
``max_tool_calls``, calls beyond it are answered with an error instead of run
(:func:`within_tool_limit`), and the next model call is asked for an answer without tools.
These rules cut across the loop's steps, so they are kept together here, with the words the
model is told.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hermes_core.agent.model_step import ModelStep
from hermes_core.agent.run_state import ActiveRun
from hermes_core.events import ExitReason, ToolOutcome
from hermes_core.messages import ToolCall, text_of
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
BUDGET_NOTICE = "The agent reached its step budget before finishing"
"""The answer of a run that ran out of iterations with nothing to say: never an empty one."""


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
    """Out of iterations: one tool-less grace call if the model has not yet spoken.

    The grace reply's tool calls (models make them though offered no tools) are not run: its
    text is the answer, or, without any, a notice naming the tools it still wanted."""
    if run.last_role() != "tool":
        return _finish(run, run.last_answer())
    outcome = await model.call(tools_allowed=False, closing_note=GRACE_REQUEST, grace=True)
    if outcome is None:
        return None
    assert outcome.response is not None
    message = outcome.response.message
    text = text_of(message.get("content")) or outcome.streamed_text
    if not text.strip():
        return _finish(run, "", wanted=message.get("tool_calls") or ())
    run.append({"role": "assistant", "content": text})
    return _finish(run, text)


def _finish(run: ActiveRun, text: str, *, wanted: Sequence[ToolCall] = ()) -> None:
    """End the run on ``text``, or, with none, on a notice that it stopped short naming the
    tools it still ``wanted`` to call."""
    if text:
        return run.finish(ExitReason.BUDGET_EXHAUSTED, text, error=_budget_error(run))
    names = list(dict.fromkeys(call["function"]["name"].replace("`", "") for call in wanted))
    notice = BUDGET_NOTICE
    if names:
        listed = ", ".join(f"`{name}`" for name in names[:-1])
        listed = f"{listed} and `{names[-1]}`" if listed else f"`{names[-1]}`"
        notice += f"; it still wanted to call {listed}"
    return run.finish_on_notice(ExitReason.BUDGET_EXHAUSTED, f"{notice}.", error=_budget_error(run))


def _budget_error(run: ActiveRun) -> str:
    return f"The iteration budget ({run.budget.max_total}) is exhausted."
