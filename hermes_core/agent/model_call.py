"""One interruptible model call: provider events in, agent events out.

The call runs in the run's own task; an interrupt cancels that task while it waits inside the
call, which closes the provider's stream and with it the upstream connection, and the call
takes the cancellation back (``Task.uncancel``) to return what it streamed so far, marked as
interrupted. Nothing of an abandoned call enters the transcript. (A task of its own per call
cost every run a task, its first step and a wake-up of the run when it ended.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar, assert_never

from hermes_core import events
from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.events import Emit
from hermes_core.providers import base as provider_events
from hermes_core.providers.base import ModelRequest, ModelResponse, Provider, ProviderEvent
from hermes_core.records import record

P = ParamSpec("P")
E = TypeVar("E", bound=events.AgentEvent)


@record(kw_only=False)
class CallOutcome:
    response: ModelResponse | None
    """The finished reply; None when the call failed or was interrupted."""
    streamed_text: str
    """Answer text streamed during the call (what the user saw)."""
    interrupted: bool = False
    error: ProviderError | None = None


class InterruptibleCall:
    """Knows the task a model call is in flight in, so an interrupt can cancel the call."""

    def __init__(self) -> None:
        self._task: asyncio.Task[object] | None = None
        """The task waiting inside :meth:`run`'s call; None between calls."""
        self._interrupting = False
        """Whether :meth:`cancel` cancelled that task (and the call must take it back)."""

    def cancel(self) -> None:
        """Interrupt the call in flight, if any (from the event loop's thread, another task
        than the call's). That task is then waiting inside the call, so the cancellation lands
        there and nowhere else. From the call's own task (an observer of its events), nothing
        is cancelled: the call ends as it would, and the run sees the interrupt after it."""
        task = self._task
        if task is None or self._interrupting or task.done() or task is asyncio.current_task():
            return
        self._interrupting = True
        task.cancel()

    async def run(
        self,
        provider: Provider,
        request: ModelRequest,
        emit: Emit,
        *,
        is_interrupted: Callable[[], bool],
        hold_text: bool = False,
        lead: str = "",
    ) -> CallOutcome:
        """Make the call. ``hold_text``: the answer's text is not emitted as it comes (the
        caller shows it once it is checked). ``lead`` goes before the first text shown (the
        break between this step's text and an earlier step's)."""
        text: list[str] = []
        pending_lead = [lead] if lead and not hold_text else []
        shown = _without_text(emit) if hold_text else emit

        if is_interrupted():  # an interrupt that landed before the call began
            return CallOutcome(None, "", interrupted=True)
        task = asyncio.current_task()
        assert task is not None, "a model call runs in a task"
        self._task, self._interrupting = task, False
        try:
            response: ModelResponse | None = None
            async for event in provider.stream(request):
                if response is not None:
                    continue  # the final response is the last event: nothing to forward
                if (
                    pending_lead
                    and isinstance(event, provider_events.ModelTextDelta)
                    and event.text
                ):
                    emit(events.TextDelta, text=pending_lead.pop())
                response = forward(event, shown, text)
            # The stream is read to its end rather than left at the response: a generator
            # left suspended is finalised later by the event loop, each one of a chain
            # (fallback turn, its attempts, the adapter) costing a task and a wake-up of the
            # loop through its self-pipe; run to the end, they all finish here, at once.
            if response is None:
                raise ProviderError(
                    f"{provider.name}: the stream ended without a final response",
                    kind=ErrorKind.INVALID_RESPONSE,
                    provider=provider.name,
                )
        except asyncio.CancelledError:
            # Ours to take back only if the interrupt's was the one cancellation: with another
            # (the run itself torn down), it goes on up.
            if self._interrupting and task.uncancel() == 0:
                return CallOutcome(None, "".join(text), interrupted=True)
            raise
        except ProviderError as exc:
            return CallOutcome(None, "".join(text), error=exc)
        finally:
            self._task = None
        if self._interrupting:
            # The provider swallowed the cancellation and finished its answer anyway: take the
            # count back too, and keep the answer.
            task.uncancel()
        return CallOutcome(response, "".join(text))


def _without_text(emit: Emit) -> Emit:
    """``emit``, except for answer text (held back by the caller: the event is made, so the
    call is checked and typed as any other, and dropped)."""

    def emit_but_text(
        event_class: Callable[Concatenate[str, int, P], E], /, *args: P.args, **fields: P.kwargs
    ) -> E:
        held = event_class is events.TextDelta
        return (events.emit_nowhere if held else emit)(event_class, *args, **fields)

    return emit_but_text


def forward(event: ProviderEvent, emit: Emit, text: list[str]) -> ModelResponse | None:
    """Turn one provider event into agent events; return the final response when it comes."""
    match event:
        case provider_events.ModelTextDelta():
            text.append(event.text)
            emit(events.TextDelta, text=event.text)
        case provider_events.ModelReasoningDelta():
            emit(events.ReasoningDelta, text=event.text)
        case provider_events.ToolCallDelta():
            emit(
                events.ToolCallGenerating,
                index=event.index,
                call_id=event.id,
                name=event.name,
                arguments_delta=event.arguments,
            )
        case provider_events.ProviderRetry():
            emit(
                events.RetryScheduled,
                provider=event.provider,
                attempt=event.attempt,
                delay_s=event.delay_s,
                reason=event.reason,
            )
        case provider_events.ProviderSwitched():
            emit(
                events.FallbackActivated,
                from_provider=event.from_provider,
                to_provider=event.to_provider,
                reason=event.reason,
            )
        case provider_events.ModelResponse():
            return event
        case _:
            assert_never(event)
    return None
