"""Compacting a conversation as a run of its own (the Responses API's ``/compact``).

Every model call goes through a run, so that it can be stopped, is counted in the metrics and
reports its usage. A compaction is not an agent turn, but it says the same things an agent's
run does: it starts, it compresses (``CompressionPerformed``, with the summariser's call), and
it finishes with the call's usage. :class:`CompactionRun` has the two methods a run manager
needs of an agent, ``execute`` and ``interrupt``.
"""

from __future__ import annotations

import asyncio

from hermes_core.agent.config import AgentRequest
from hermes_core.agent.emitter import Deliver, Emitter
from hermes_core.context.compression import CompressionResult, Compressor, estimate_tokens
from hermes_core.events import (
    CompressionPerformed,
    ExitReason,
    InterruptSource,
    RunFinished,
    RunStarted,
)
from hermes_core.ids import token_hex
from hermes_core.usage import Usage

TARGET_SHARE = 4
"""A compaction aims at a quarter of the conversation's estimated tokens."""


class CompactionRun:
    """Compresses one request's conversation (its history and new message) into the smallest
    transcript the compressor can make, announcing it as a run."""

    def __init__(self, compressor: Compressor, *, context_window: int) -> None:
        self.compressor = compressor
        self.context_window = context_window
        self._task: asyncio.Task[CompressionResult] | None = None
        self._interrupt: tuple[str, InterruptSource] | None = None

    def interrupt(
        self, reason: str = "interrupted", *, source: InterruptSource = InterruptSource.OTHER
    ) -> None:
        """Stop the compaction (its summariser call is cancelled)."""
        self._interrupt = (reason, source)
        if self._task is not None:
            self._task.cancel()

    async def execute(self, request: AgentRequest, deliver: Deliver) -> None:
        emitter = Emitter(request.run_id or f"run_{token_hex(8)}", deliver)
        summariser = self.compressor.summariser
        emitter.emit(
            RunStarted,
            task_id=request.task_id or f"task_{token_hex(8)}",
            model=summariser.model if summariser is not None else "",
            provider=summariser.name if summariser is not None else "",
            budget=1,
            streamed=False,
        )
        messages = request.conversation()
        tokens = estimate_tokens(messages)
        self._task = asyncio.ensure_future(
            self.compressor.compress(
                messages,
                context_window=self.context_window,
                target_tokens=max(tokens // TARGET_SHARE, 1),
            )
        )
        if self._interrupt is not None:  # an interrupt that came before the work began
            self._task.cancel()
        try:
            result = await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._interrupt is None or (current is not None and current.cancelling()):
                raise  # torn down from outside, not interrupted
            reason, source = self._interrupt
            emitter.emit(
                RunFinished,
                exit_reason=ExitReason.INTERRUPTED,
                final_text="",
                iterations=0,
                usage=Usage(),
                model_calls=0,
                error=f"Interrupted: {reason}",
                interrupt_source=source,
            )
            return
        finally:
            self._task = None
        call = result.summariser_call
        emitter.emit(
            CompressionPerformed,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            messages_before=len(messages),
            messages_after=len(result.messages),
            session_id=None,
            parent_session_id=None,
            messages=result.messages,
            summarised=result.summarised,
            summariser_call=call,
        )
        emitter.emit(
            RunFinished,
            exit_reason=ExitReason.COMPLETED,
            final_text="",
            iterations=0,
            usage=call.usage if call is not None else Usage(),
            model_calls=0,
            transcript_length=len(result.messages),
            calls=[call] if call is not None else [],
        )
