"""The iteration budget: how many model calls a run (and its sub-agents) may make."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

DEFAULT_MAX_ITERATIONS = 90

PressureTier = Literal["caution", "warning"]


class IterationBudget:
    """A pool of iterations, shared by a parent agent and its sub-agents.

    Safe to use from several tasks and threads: children of one parent run concurrently.
    """

    def __init__(self, max_total: int = DEFAULT_MAX_ITERATIONS) -> None:
        if max_total < 1:
            raise ValueError("an iteration budget needs at least one iteration")
        self.max_total = max_total
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def remaining(self) -> int:
        return self.max_total - self._used

    def consume(self) -> bool:
        """Take one iteration; False (taking nothing) when the pool is empty."""
        with self._lock:
            if self._used >= self.max_total:
                return False
            self._used += 1
            return True

    def refund(self) -> None:
        """Give one iteration back (a call that should not count, e.g. a malformed-JSON retry)."""
        with self._lock:
            self._used = max(0, self._used - 1)

    def __repr__(self) -> str:
        return f"IterationBudget(used={self._used}, max_total={self.max_total})"


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPressure:
    """When and how to tell the model that its budget is running low."""

    enabled: bool = True
    caution_at: float = 0.70
    warning_at: float = 0.90

    def tier(self, used: int, total: int) -> PressureTier | None:
        if not self.enabled or total <= 0:
            return None
        ratio = used / total
        if ratio >= self.warning_at:
            return "warning"
        if ratio >= self.caution_at:
            return "caution"
        return None

    def note(self, used: int, total: int) -> str | None:
        """The line appended to the last tool result the model sees, if any."""
        tier = self.tier(used, total)
        left = total - used
        plural = "" if left == 1 else "s"
        if tier == "warning":
            return (
                f"[BUDGET WARNING: Iteration {used}/{total}. Only {left} iteration{plural} left. "
                "Provide your final response NOW.]"
            )
        if tier == "caution":
            return (
                f"[BUDGET: Iteration {used}/{total}. {left} iteration{plural} left. "
                "Start consolidating your work.]"
            )
        return None
