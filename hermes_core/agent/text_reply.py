"""A reply without tool calls: finish the run on it, or recover once from a bad one.

Most runs end here, and the ways they end are many: a refusal, an answer cut off or filtered,
a structured answer that has (or, asked once more, still has not) the requested shape, an
empty reply after tool results (nudged once), or text the model said before a housekeeping
call. Each is decided by :func:`handle_text`, apart from the tool-call path, which never ends
on the model's text.
"""

from __future__ import annotations

from hermes_core.agent.builtins import HOUSEKEEPING_TOOLS
from hermes_core.agent.run_state import ActiveRun
from hermes_core.agent.structured import check_answer, repair_note
from hermes_core.events import ExitReason, TextDelta
from hermes_core.messages import Message, text_of
from hermes_core.providers.base import ModelResponse

FILTERED = "The upstream's content filter stopped the answer."
EMPTY_NUDGE = (
    "You just executed tool calls but returned an empty response. Please process the tool "
    "results above and continue with the task."
)


def handle_text(run: ActiveRun, response: ModelResponse, streamed: str) -> bool:
    """Finish on a text reply, or recover from an empty one. True means: loop again."""
    text = text_of(response.message.get("content")) or streamed
    refusal = response.message.get("refusal")
    if refusal and not text.strip():
        # A refusal is the model's answer, in the standard field: no shape to check. The
        # transcript keeps it as the turn's text (what the next calls should see).
        refused: Message = dict(response.message)  # type: ignore[assignment]
        refused["content"] = refusal
        run.append(refused)
        run.finish(ExitReason.COMPLETED, "", refusal=refusal)
        return False
    if text.strip():
        message: Message = dict(response.message)  # type: ignore[assignment]
        message["content"] = text
        if run.output_format is not None and response.finish_reason == "stop":
            return _shaped(run, message, text)
        run.append(message)
        if response.finish_reason == "length":
            run.finish(
                ExitReason.TRUNCATED,
                text,
                error="The answer was cut off by the output token limit.",
            )
        elif response.finish_reason == "content_filter":
            run.finish(ExitReason.FAILED, text, error=FILTERED, content_filtered=True)
        else:
            run.finish(ExitReason.COMPLETED, text)
        return False
    if response.finish_reason == "content_filter":  # stopped before it said anything
        run.finish(ExitReason.FAILED, "", error=FILTERED, content_filtered=True)
        return False
    earlier = _text_before_housekeeping(run)
    if earlier:
        run.finish(ExitReason.COMPLETED, earlier)
        return False
    if response.finish_reason == "length":  # cut off before any answer, not an empty one
        run.finish(
            ExitReason.TRUNCATED,
            "",
            error="The reply was cut off by the output token limit before any answer "
            "(its reasoning may have used it all). Raise max_tokens and try again.",
        )
        return False
    if run.last_role() == "tool" and not run.state.nudged:
        run.state.nudged = True
        run.append({"role": "assistant", "content": "(empty)"})
        run.append({"role": "user", "content": EMPTY_NUDGE})
        return True
    run.finish(ExitReason.FAILED, "", error="The model returned an empty response.")
    return False


def _shaped(run: ActiveRun, message: Message, text: str) -> bool:
    """Finish with an answer of the requested shape, shown now (it was held back); ask
    once more when it has not the shape; then fail. True means: loop again."""
    assert run.output_format is not None
    answer, problem = check_answer(text, run.output_format)
    if problem is None:
        message["content"] = answer
        run.append(message)
        run.emit(TextDelta, text=answer)
        run.finish(ExitReason.COMPLETED, answer)
        return False
    run.append(message)
    if not run.state.reshaped:
        run.state.reshaped = True
        run.append({"role": "user", "content": repair_note(run.output_format, problem)})
        return True
    run.finish(
        ExitReason.FAILED,
        "",
        error=f"The answer did not have the requested shape ({problem}).",
    )
    return False


def _text_before_housekeeping(run: ActiveRun) -> str:
    """The previous assistant's text, if its only tool calls were housekeeping ones."""
    for message in reversed(run.state.transcript):
        if message["role"] != "assistant":
            continue
        names = {call["function"]["name"] for call in message.get("tool_calls") or ()}
        text = text_of(message.get("content"))
        if names and names <= HOUSEKEEPING_TOOLS and text.strip():
            return text
        return ""
    return ""
