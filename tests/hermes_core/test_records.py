"""Records (``hermes_core/records.py``): values, whose copies leave the original as it was."""

from __future__ import annotations

import dataclasses

from hermes_core.agent import AgentRequest
from hermes_core.records import record


@record
class Point:
    x: int
    y: int = 0


def test_records_are_equal_and_hash_alike_by_value() -> None:
    assert Point(x=1, y=2) == Point(x=1, y=2)
    assert len({Point(x=1, y=2), Point(x=1, y=2), Point(x=2)}) == 2


def test_a_copied_request_leaves_the_original_without_the_change() -> None:
    # start_run gives each run's request the ledger's hook on a copy: a request a caller keeps
    # (or starts twice) never carries another run's hook.
    original = AgentRequest(user_message="hi", run_id="run_1")
    copied = dataclasses.replace(original, on_call=print)
    assert copied.on_call is print
    assert original.on_call is None
    assert copied.user_message == original.user_message
