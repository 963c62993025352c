"""A turn begun queued: its run exists at once, and joins its session inside its own task.

A background response whose conversation is busy with another turn would otherwise keep its
create waiting for that turn to end (or answer a 409 once ``session_wait_seconds`` passed);
its create answers at once, ``queued``, instead. Its run waits in the conversation's line (as
an ``enqueue`` turn does), then runs as any turn does; meanwhile it can be retrieved, streamed
again and cancelled like any run, and one stopped before it joined ends ``interrupted``
having written nothing to the conversation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from hermes_core.agent import AgentRequest
from hermes_core.events import AgentEvent, ExitReason, InterruptSource, RunFinished
from hermes_core.usage import Usage
from server.runs.manager import Runnable

log = logging.getLogger("hermes.runs")

JoinLater = Callable[[AgentRequest], Coroutine[Any, Any, tuple[AgentRequest, Runnable]]]
"""Joins the run's session, the run's request given: the request on the session's
transcript, and what runs it. Gives the session's turn back itself if it fails."""


class QueuedTurn:
    """The :class:`Runnable` of a turn begun queued: ``join`` once it runs, then what it gave.

    ``abandon`` gives back a session turn ``join`` got after all (the run was stopped just as
    it got it)."""

    def __init__(self, join: JoinLater, *, abandon: Callable[[], None]) -> None:
        self._join = join
        self._abandon = abandon
        self._joining: asyncio.Task[tuple[AgentRequest, Runnable]] | None = None
        self._runnable: Runnable | None = None
        self._stopped: tuple[str, InterruptSource] | None = None

    async def execute(self, request: AgentRequest, deliver: Callable[[AgentEvent], object]) -> None:
        if self._ended_if_stopped(request, deliver):  # stopped before its task first ran
            return
        joining = asyncio.create_task(self._join(request), name=f"hermes-join-{request.run_id}")
        self._joining = joining
        try:
            await asyncio.wait({joining})  # not raising when an interrupt cancels the join
        except BaseException:  # the run's own task was cancelled
            joining.cancel()
            raise
        finally:
            self._joining = None
        if self._stopped is not None and not joining.cancelled() and not joining.exception():
            self._abandon()  # joined as it was stopped: nothing of it is kept
        if self._ended_if_stopped(request, deliver):
            return
        failure = joining.exception()
        if failure is not None:
            log.warning("a queued turn could not join its session: %s", failure)
            deliver(_ending(request, ExitReason.FAILED, str(failure) or type(failure).__name__))
            return
        joined, runnable = joining.result()
        self._runnable = runnable
        await runnable.execute(joined, deliver)

    def _ended_if_stopped(
        self, request: AgentRequest, deliver: Callable[[AgentEvent], object]
    ) -> bool:
        """End the run ``interrupted`` if it was stopped before it joined its session."""
        if self._stopped is None:
            return False
        reason, source = self._stopped
        deliver(_ending(request, ExitReason.INTERRUPTED, reason, source))
        return True

    def interrupt(
        self, reason: str = "interrupted", *, source: InterruptSource = InterruptSource.OTHER
    ) -> None:
        if self._runnable is not None:
            self._runnable.interrupt(reason, source=source)
            return
        if self._stopped is None:
            self._stopped = (reason, source)
        if self._joining is not None:
            self._joining.cancel()


def _ending(
    request: AgentRequest,
    exit_reason: ExitReason,
    error: str,
    source: InterruptSource | None = None,
) -> RunFinished:
    """The ending of a run that never joined its session: its first and only event."""
    return RunFinished(
        run_id=request.run_id or "",
        seq=0,
        exit_reason=exit_reason,
        final_text="",
        iterations=0,
        usage=Usage(),
        model_calls=0,
        error=error,
        interrupt_source=source,
    )
