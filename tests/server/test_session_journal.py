from typing import get_args

from hermes_core.events import (
    AgentEvent,
    CompressionPerformed,
    MessageAdded,
    RunFinished,
    RunStarted,
)
from server.sessions import journal


def test_the_journal_passes_over_at_once_only_kinds_that_change_no_record() -> None:
    writing = {MessageAdded, RunFinished, RunStarted, CompressionPerformed}
    assert journal._CHANGE_NOTHING.isdisjoint(writing)
    assert journal._CHANGE_NOTHING | writing == set(get_args(AgentEvent))
