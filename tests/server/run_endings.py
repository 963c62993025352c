"""A run's ending made of its model calls, for tests of what observes endings (metrics, the
usage ledger, budgets)."""

from __future__ import annotations

from collections.abc import Sequence

from hermes_core.events import CallRecord, ExitReason, RunFinished
from hermes_core.usage import Usage


def ending_of(run_id: str, calls: Sequence[CallRecord], *, seq: int = 5) -> RunFinished:
    """A completed run's ``RunFinished`` whose usage, cost and calls are those of ``calls``."""
    return RunFinished(
        run_id=run_id,
        seq=seq,
        exit_reason=ExitReason.COMPLETED,
        final_text="done",
        iterations=len(calls),
        usage=sum((call.usage for call in calls), Usage()),
        model_calls=len(calls),
        cost_usd=sum(call.cost_usd for call in calls),
        calls=list(calls),
    )
