"""IterationBudget accounting and BudgetPressure's tiers and notes."""

from __future__ import annotations

import threading

import pytest

from hermes_core.agent.budget import BudgetPressure, IterationBudget


def test_a_new_budget_has_used_nothing() -> None:
    budget = IterationBudget(3)

    assert (budget.used, budget.remaining, budget.max_total) == (0, 3, 3)


def test_the_default_budget_is_ninety_iterations() -> None:
    assert IterationBudget().remaining == 90


def test_a_budget_needs_at_least_one_iteration() -> None:
    with pytest.raises(ValueError, match="at least one iteration"):
        IterationBudget(0)


def test_consume_takes_one_until_the_pool_is_empty() -> None:
    budget = IterationBudget(2)

    assert [budget.consume() for _ in range(4)] == [True, True, False, False]
    assert (budget.used, budget.remaining) == (2, 0)


def test_refund_gives_one_back() -> None:
    budget = IterationBudget(2)
    budget.consume()
    budget.consume()

    budget.refund()

    assert (budget.used, budget.remaining) == (1, 1)
    assert budget.consume() is True


def test_refund_never_goes_below_zero() -> None:
    budget = IterationBudget(2)

    budget.refund()

    assert (budget.used, budget.remaining) == (0, 2)


def test_the_repr_shows_used_and_total() -> None:
    budget = IterationBudget(5)
    budget.consume()

    assert repr(budget) == "IterationBudget(used=1, max_total=5)"


def test_concurrent_consumers_never_overdraw() -> None:
    budget = IterationBudget(5000)
    granted: list[int] = []
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        granted.append(sum(budget.consume() for _ in range(1000)))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert (sum(granted), budget.used, budget.remaining) == (5000, 5000, 0)


def test_pressure_tiers_start_at_seventy_and_ninety_percent() -> None:
    pressure = BudgetPressure()

    tiers = [pressure.tier(used, 100) for used in (0, 69, 70, 89, 90, 100)]

    assert tiers == [None, None, "caution", "caution", "warning", "warning"]


def test_pressure_tiers_hold_at_the_default_budget() -> None:
    pressure = BudgetPressure()

    tiers = [pressure.tier(used, 90) for used in (62, 63, 80, 81)]

    assert tiers == [None, "caution", "caution", "warning"]


def test_pressure_thresholds_can_be_changed() -> None:
    pressure = BudgetPressure(caution_at=0.5, warning_at=0.75)

    assert [pressure.tier(used, 4) for used in (1, 2, 3)] == [None, "caution", "warning"]


def test_disabled_pressure_has_no_tier_and_no_note() -> None:
    pressure = BudgetPressure(enabled=False)

    assert (pressure.tier(99, 100), pressure.note(99, 100)) == (None, None)


def test_an_empty_total_has_no_tier() -> None:
    assert BudgetPressure().tier(0, 0) is None


def test_there_is_no_note_below_the_caution_tier() -> None:
    assert BudgetPressure().note(69, 100) is None


def test_the_caution_note_asks_to_consolidate() -> None:
    assert BudgetPressure().note(70, 100) == (
        "[BUDGET: Iteration 70/100. 30 iterations left. Start consolidating your work.]"
    )


def test_the_caution_note_says_iteration_when_one_is_left() -> None:
    # Below ten iterations the caution tier reaches the last one: 4/5 is 80 %.
    assert BudgetPressure().note(4, 5) == (
        "[BUDGET: Iteration 4/5. 1 iteration left. Start consolidating your work.]"
    )


def test_the_warning_note_asks_for_the_final_response() -> None:
    assert BudgetPressure().note(90, 100) == (
        "[BUDGET WARNING: Iteration 90/100. Only 10 iterations left. "
        "Provide your final response NOW.]"
    )


def test_the_warning_note_says_iteration_when_one_is_left() -> None:
    assert BudgetPressure().note(99, 100) == (
        "[BUDGET WARNING: Iteration 99/100. Only 1 iteration left. "
        "Provide your final response NOW.]"
    )
