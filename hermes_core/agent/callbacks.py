"""The callback surface, as one adapter over the event stream.

Callers that prefer callbacks to iterating events pass :class:`AgentCallbacks` to the agent;
:meth:`AgentCallbacks.dispatch` maps each event to the matching callback. A callback may be a
plain function or a coroutine function; whatever it raises is logged and never reaches the loop.
``clarify_callback`` is the one callback that answers rather than watches: the agent's
``clarify`` tool asks it a question and waits for the reply.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_never

from hermes_core.events import (
    AgentEvent,
    ApprovalRequested,
    ApprovalResolved,
    BudgetWarning,
    ClientToolCallsPending,
    CompressionPerformed,
    FallbackActivated,
    ImagePartial,
    MessageAdded,
    ModelCallStarted,
    PlanMade,
    ReasoningDelta,
    RetryScheduled,
    RunFinished,
    RunStarted,
    SourcesFound,
    Steered,
    StepFinished,
    SubagentEvent,
    TextDelta,
    ToolCallGenerating,
    ToolFinished,
    ToolProgress,
    ToolStarted,
)

log = logging.getLogger(__name__)

Callback = Callable[..., Awaitable[Any] | Any]


@dataclass(slots=True, kw_only=True)
class AgentCallbacks:
    tool_progress_callback: Callback | None = None
    """``(phase, tool_name, detail)``; phase is ``started`` or ``finished``; detail is a dict."""
    thinking_callback: Callback | None = None
    """``(message)``: what the agent is doing now, e.g. "Calling gpt-4.1" before each model
    call, or "Budget exhausted: asking gpt-4.1 for a final answer" before the grace call."""
    reasoning_callback: Callback | None = None
    """``(text)``: a piece of the model's reasoning."""
    clarify_callback: Callback | None = None
    """``(question, choices) -> answer``: answers the agent's ``clarify`` tool."""
    step_callback: Callback | None = None
    """``(iteration, detail)`` after each model call; detail has usage and finish reason."""
    stream_delta_callback: Callback | None = None
    """``(text)``: a piece of the answer as it streams."""
    tool_gen_callback: Callback | None = None
    """``(tool_name, arguments_delta)`` while the model writes a tool call."""
    status_callback: Callback | None = None
    """``(kind, message)`` for lifecycle news: started, budget, fallback, compression, finished."""

    async def dispatch(self, event: AgentEvent) -> None:  # noqa: C901 - one case per event kind
        match event:
            case ToolStarted():
                await self._call(
                    self.tool_progress_callback,
                    "started",
                    event.name,
                    {
                        "call_id": event.call_id,
                        "arguments": event.arguments,
                        "summary": event.summary,
                    },
                )
            case ToolFinished():
                await self._call(
                    self.tool_progress_callback,
                    "finished",
                    event.name,
                    {
                        "call_id": event.call_id,
                        "ok": event.ok,
                        "outcome": event.outcome.value,
                        "duration_s": event.duration_s,
                        "preview": event.result_preview,
                        "error": event.error,
                    },
                )
            case ModelCallStarted():
                await self._call(self.thinking_callback, _thinking_line(event))
            case ReasoningDelta():
                await self._call(self.reasoning_callback, event.text)
            case TextDelta():
                await self._call(self.stream_delta_callback, event.text)
            case ToolCallGenerating():
                await self._call(self.tool_gen_callback, event.name, event.arguments_delta)
            case ToolProgress():
                await self._call(
                    self.tool_progress_callback,
                    "progress",
                    event.name,
                    {"call_id": event.call_id, "output": event.output},
                )
            case StepFinished():
                await self._call(
                    self.step_callback,
                    event.iteration,
                    {
                        "usage": event.usage,
                        "finish_reason": event.finish_reason,
                        "provider": event.provider,
                        "model": event.model,
                    },
                )
            case RunStarted():
                await self._call(self.status_callback, "started", event.model)
            case BudgetWarning():
                await self._call(
                    self.status_callback,
                    "budget",
                    f"{event.tier}: {event.used}/{event.total} iterations",
                )
            case RetryScheduled():
                await self._call(
                    self.status_callback,
                    "retrying",
                    f"{event.provider} ({event.reason}), again in {event.delay_s:.1f} s",
                )
            case FallbackActivated():
                await self._call(
                    self.status_callback,
                    "fallback",
                    f"{event.from_provider} → {event.to_provider} ({event.reason})",
                )
            case CompressionPerformed():
                await self._call(
                    self.status_callback,
                    "compression",
                    f"{event.tokens_before} → {event.tokens_after} tokens",
                )
            case ApprovalRequested():
                await self._call(self.status_callback, "approval", f"{event.name}: {event.reason}")
            case PlanMade():
                steps = "; ".join(event.steps)
                await self._call(
                    self.status_callback, "replanned" if event.replanned else "plan", steps
                )
            case RunFinished():
                await self._call(self.status_callback, "finished", event.exit_reason.value)
            case SubagentEvent():
                await self.dispatch(event.event)
            case (
                ApprovalResolved()
                | MessageAdded()
                | ClientToolCallsPending()
                | SourcesFound()
                | ImagePartial()
                | Steered()
            ):
                pass
            case _:
                assert_never(event)

    @staticmethod
    async def _call(callback: Callback | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            result = callback(*args)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("a callback raised; the run goes on")


def _thinking_line(event: ModelCallStarted) -> str:
    if event.grace:
        return f"Budget exhausted: asking {event.model} for a final answer"
    return f"Calling {event.model}"
