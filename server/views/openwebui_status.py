"""Open WebUI's status lines for one run: which line each event shows, the same for the chat
and the Responses views (each wraps the words in its own frame).

Every line is sent done. Open WebUI stores every status in the message's history and
shimmers the last one while it is not done; its Stop button closes the connection to us, and
its cancel handler closes running tool cards but never the status history, so a line sent
"not done" while a tool runs would shimmer forever. What runs is shown by the tool card
("Executing shell…"); the lines say what happened — the step, the output it wrote so far
(``shell: step 3``), the outcome — so whichever is last when the client leaves stays true.

Each step shows once, here, never also as reasoning; a line equal to the one before it is not
repeated (Open WebUI appends each to the history it lists).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hermes_core.events import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    ExitReason,
    FallbackActivated,
    PlanMade,
    RunFinished,
    ToolFinished,
    ToolOutcome,
    ToolProgress,
    ToolStarted,
)
from server.views.progress import (
    StatusEvent,
    approval_status,
    awaiting_approval_status,
    ending_status_text,
    fallback_text,
    plan_status,
    progress_status,
    status_text,
    tool_started_status,
    tool_status_text,
)


@dataclass(slots=True)
class OpenWebUIStatus:
    """The status lines of one run, as descriptions (each shown with ``done: true``)."""

    shown: bool = False
    """A line was shown: the run's end must leave one saying how it ended."""
    _last: str | None = None
    _asked: dict[str, ApprovalRequested] = field(default_factory=dict)
    """Approvals asked for, by call id."""
    _waiting: dict[str, ApprovalRequested] = field(default_factory=dict)
    """Asks whose call ended awaiting the user's answer: the run's last line repeats them."""
    _decided: dict[str, ApprovalDecision] = field(default_factory=dict)
    """Calls an approval decision was given for, by call id."""

    def refused(self, call_id: str) -> bool:
        """Whether the call was denied (or not approved in time) before it ran: its card is
        drawn as refused."""
        decision = self._decided.get(call_id)
        return decision is not None and decision is not ApprovalDecision.APPROVED

    def tool_started(self, event: ToolStarted, *, prefix: str = "") -> list[str]:
        if self.refused(event.call_id):
            return []  # the decision's line said it: it will not run
        return self._say(tool_started_status(event, prefix=prefix))

    def tool_progress(self, event: ToolProgress) -> list[str]:
        return self._say(progress_status(event))

    def tool_finished(self, event: ToolFinished, *, prefix: str = "") -> list[str]:
        if event.outcome is ToolOutcome.AWAITING_APPROVAL:
            ask = self._asked.get(event.call_id)
            if ask is None:
                return []
            self._waiting[event.call_id] = ask
            return self._say(approval_status(ask))  # the question, now that it is one
        if event.outcome is ToolOutcome.DENIED and event.call_id in self._decided:
            return []  # the decision's line said it
        return self._say(tool_status_text(event, prefix=prefix))

    def approval(self, event: ApprovalRequested | ApprovalResolved) -> list[str]:
        if isinstance(event, ApprovalRequested):
            # Not said yet: a standing grant ("approve for this session") answers it at once,
            # and a question the user was never asked must not be in the history. A call that
            # ends the turn waiting for the user says it (``tool_finished``).
            self._asked[event.call_id] = event
            return []
        self._decided[event.call_id] = event.decision
        return self._say(approval_status(event))

    def step(self, event: StatusEvent | FallbackActivated) -> list[str]:
        """A retry, fallback, budget warning or compression."""
        if isinstance(event, FallbackActivated):
            return self._say(fallback_text(event))
        return self._say(status_text(event))

    def plan(self, event: PlanMade) -> list[str]:
        """The plan's heading, then each step: a line each (none is a repeat of the last)."""
        return [line for text in plan_status(event) for line in self._say(text)]

    def ending(self, event: RunFinished) -> list[str]:
        """How the run ended, once anything was shown (a plain answer gets no status line)."""
        if not self.shown:
            return []
        if event.exit_reason is ExitReason.AWAITING_APPROVAL and self._waiting:
            return self._say(awaiting_approval_status(list(self._waiting.values())))
        return self._say(ending_status_text(event))

    def _say(self, description: str | None) -> list[str]:
        if description is None or description == self._last:
            return []
        self._last = description
        self.shown = True
        return [description]
