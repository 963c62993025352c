"""One interruptible model call: provider events in, agent events out.

The call runs in its own task so that an interrupt can cancel it at any moment; cancelling it
closes the provider's stream and with it the upstream connection. Nothing of an abandoned call
enters the transcript: the caller gets the text streamed so far, marked as interrupted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from hermes_core import events
from hermes_core.errors import ErrorKind, ProviderError
from hermes_core.providers import base as provider_events
from hermes_core.providers.base import ModelRequest, ModelResponse, Provider

Emit = Callable[..., object]


@dataclass(frozen=True, slots=True)
class CallOutcome:
    response: ModelResponse | None
    """The finished reply; None when the call failed or was interrupted."""
    streamed_text: str
    """Answer text streamed during the call (what the user saw)."""
    interrupted: bool = False
    error: ProviderError | None = None


class InterruptibleCall:
    """Holds the task of the model call in flight so an interrupt can cancel it."""

    def __init__(self) -> None:
        self._task: asyncio.Task[ModelResponse] | None = None

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def run(
        self,
        provider: Provider,
        request: ModelRequest,
        emit: Emit,
        *,
        is_interrupted: Callable[[], bool],
    ) -> CallOutcome:
        text: list[str] = []

        async def consume() -> ModelResponse:
            async for event in provider.stream(request):
                if isinstance(event, provider_events.TextDelta):
                    text.append(event.text)
                    emit(events.TextDelta, text=event.text)
                elif isinstance(event, provider_events.ReasoningDelta):
                    emit(events.ReasoningDelta, text=event.text)
                elif isinstance(event, provider_events.ToolCallDelta):
                    emit(
                        events.ToolCallGenerating,
                        index=event.index,
                        call_id=event.id,
                        name=event.name,
                        arguments_delta=event.arguments,
                    )
                else:
                    return event
            raise ProviderError(
                f"{provider.name}: the stream ended without a final response",
                kind=ErrorKind.INVALID_RESPONSE,
                provider=provider.name,
            )

        self._task = asyncio.create_task(consume())
        if is_interrupted():  # an interrupt that landed before the task existed
            self._task.cancel()
        try:
            response = await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # the run itself is being torn down, not interrupted
            return CallOutcome(None, "".join(text), interrupted=True)
        except ProviderError as exc:
            return CallOutcome(None, "".join(text), error=exc)
        finally:
            self._task = None
        return CallOutcome(response, "".join(text))
