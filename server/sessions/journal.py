"""The run observer that writes transcripts: every run event that changes the record becomes a
queued write (see :mod:`hermes_core.persistence.writer`).

- ``RunStarted``: the run's row, and what its turn adds to the conversation (its new
  session or fork, the client's new messages: held back until then, so a turn refused before
  its run began keeps nothing). A run begun queued (a background response waiting for its
  conversation) has its row written when it is begun instead (:meth:`SessionJournal.queued`):
  crash recovery then finds it, and fails its response, should the server stop while it
  waits; its ``RunStarted`` names the session it joined.
- ``MessageAdded``: the message, at its position in the session (the run's transcript *is*
  the session's, so the event's index is the position).
- ``CompressionPerformed``: a child session that starts from the compacted transcript; the
  parent ends, and the run's later messages go to the child.
- ``RunFinished``: the run's ending, the session's token counters, and the turn lock released.
  The run manager flushes the queue before any client hears of the ending. A run whose
  responses are saved once it has ended (a stored Responses turn's, and any steered into it)
  keeps the lock until each is (:meth:`SessionJournal.release`): a response says where in the
  session it ended, and a change to the conversation made before its save (a deleted item
  moving what follows it) would be overwritten by it.

Everything else changes nothing on record; a sub-agent's events are part of its parent's
``delegate_task`` call, whose result is the message that is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

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
from hermes_core.persistence import Store, StoredMessage
from server.runs.manager import STATUS_OF_EXIT, RunInfo


@dataclass(slots=True)
class _Tracked:
    session_id: str
    """The session the run writes to now (a compression moves it to a child)."""
    lock: tuple[str, str] | None
    """(owner, name) of the conversation lock the run holds."""
    save: Callable[[], None] | None = None
    """Writes what the run's turn adds to the conversation: called when the run starts (or
    ends, should it end before it started)."""
    keepers: int = 0
    """Saves to come once the run has ended (its responses'): its lock outlives it until
    each has said :meth:`SessionJournal.release`."""


@dataclass(slots=True)
class _Held:
    """The lock of an ended run, kept for saves still to come."""

    lock: tuple[str, str]
    keepers: int


class SessionJournal:
    observed_kinds = frozenset({MessageAdded, RunFinished, RunStarted, CompressionPerformed})
    """The kinds it writes for (``server/runs/observers.py``): the run manager hands it no
    other."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._runs: dict[str, _Tracked] = {}
        self._held: dict[str, _Held] = {}
        """The locks of ended runs kept for saves to come, by run."""
        self._queued: set[str] = set()
        """Runs begun queued whose row is written, not yet started."""

    def queued(self, run: RunInfo) -> None:
        """The row of a run begun queued, before it joins its conversation (no session yet)."""
        self._queued.add(run.id)
        self._started(run, None, status="queued")

    def track(
        self,
        run_id: str,
        session_id: str,
        *,
        lock: tuple[str, str] | None,
        save: Callable[[], None] | None = None,
        kept: bool = False,
    ) -> None:
        """Write the run's transcript into ``session_id``; ``lock``: the conversation lock
        it holds, given back when it ends (``kept``: once its turn's response is saved too,
        as :meth:`keep` says)."""
        self._runs[run_id] = _Tracked(session_id, lock, save, 1 if kept else 0)

    def untrack(self, run_id: str) -> None:
        """Stop writing for the run, and give its lock back (kept or not)."""
        tracked = self._runs.pop(run_id, None)
        if tracked is not None and tracked.lock is not None:
            self.store.sessions.unlock(*tracked.lock, run_id)

    def keep(self, run_id: str) -> bool:
        """One more save the run's lock waits for once the run has ended (a response steered
        into it); each says :meth:`release` when written. False: the lock is back already."""
        tracked = self._runs.get(run_id)
        if tracked is not None:
            tracked.keepers += 1
            return True
        held = self._held.get(run_id)
        if held is not None:
            held.keepers += 1
            return True
        return False

    def release(self, run_id: str) -> bool:
        """A save the run's lock was kept for is queued (a batch writes the unlock last): the
        lock goes back once the run has ended and none is left to come. Whether it went back
        (queued) now."""
        tracked = self._runs.get(run_id)
        if tracked is not None:
            tracked.keepers = max(0, tracked.keepers - 1)
            return False
        held = self._held.get(run_id)
        if held is None:
            return False
        held.keepers -= 1
        if held.keepers > 0:
            return False
        del self._held[run_id]
        self.store.sessions.unlock(*held.lock, run_id)
        return True

    def __call__(self, run: RunInfo, event: AgentEvent) -> None:
        # Only the kinds in ``observed_kinds`` come here; the others are listed below as
        # writing nothing, so that a new kind of event must be placed.
        match event:
            case MessageAdded():
                tracked = self._runs.get(run.id)
                if tracked is not None:
                    self.store.sessions.add_messages(
                        tracked.session_id, event.index, [StoredMessage(event.message, "agent")]
                    )
            case RunFinished():
                self._finished(run, event)
            case RunStarted():
                tracked = self._runs.get(run.id)
                if tracked is not None:
                    self._save(tracked)
                session_id = tracked.session_id if tracked else run.session_id
                if run.id not in self._queued:
                    self._started(run, session_id)
                else:
                    self._queued.discard(run.id)
                    self.store.runs.status(run.id, "running")
                    if session_id is not None:
                        self.store.runs.moved(run.id, session_id)
            case CompressionPerformed():
                tracked = self._runs.get(run.id)
                if tracked is not None and event.session_id is not None:
                    self._compressed(run, tracked, event.session_id, event)
            case (
                TextDelta()
                | ReasoningDelta()
                | ToolCallGenerating()
                | ModelCallStarted()
                | StepFinished()
                | ToolStarted()
                | ToolProgress()
                | ImagePartial()
                | SourcesFound()
                | ToolFinished()
                | ApprovalRequested()
                | ApprovalResolved()
                | ClientToolCallsPending()
                | BudgetWarning()
                | RetryScheduled()
                | FallbackActivated()
                | SubagentEvent()
                | PlanMade()
                | Steered()
            ):
                pass
            case _:
                assert_never(event)

    def _started(self, run: RunInfo, session_id: str | None, status: str = "running") -> None:
        self.store.runs.started(
            run_id=run.id,
            owner=run.owner,
            endpoint=run.endpoint,
            model=run.model,
            session_id=session_id,
            completion_id=run.completion_id,
            created_at=run.created_at,
            end_user=run.end_user,
            status=status,
        )

    @staticmethod
    def _save(tracked: _Tracked) -> None:
        if tracked.save is not None:
            save, tracked.save = tracked.save, None
            save()

    def _compressed(
        self, run: RunInfo, tracked: _Tracked, child: str, event: CompressionPerformed
    ) -> None:
        sessions = self.store.sessions
        parent = tracked.session_id
        sessions.create_compression_child(parent, child)
        sessions.add_messages(
            child, 0, [StoredMessage(m, "agent", compacted=True) for m in event.messages]
        )
        sessions.end(parent, "compression")
        self.store.runs.moved(run.id, child)
        tracked.session_id = child

    def _finished(self, run: RunInfo, event: RunFinished) -> None:
        self._queued.discard(run.id)  # one cancelled while it waited: its row ends here
        tracked = self._runs.get(run.id)
        if tracked is not None:
            self._save(tracked)  # a run that ended before it started is a turn all the same
            self.store.sessions.add_usage(tracked.session_id, event.usage)
        self.store.runs.finished(
            run.id,
            status=STATUS_OF_EXIT[event.exit_reason].value,
            exit_reason=event.exit_reason.value,
            iterations=event.iterations,
            model_calls=event.model_calls,
            usage=event.usage.as_dict(),
            error=event.error,
            cost_usd=event.cost_usd,
        )
        if tracked is not None and tracked.keepers and tracked.lock is not None:
            del self._runs[run.id]  # its responses' saves give the lock back (release)
            self._held[run.id] = _Held(tracked.lock, tracked.keepers)
        else:
            self.untrack(run.id)
