from typing import cast, get_args

from hermes_core.events import (
    AgentEvent,
    CompressionPerformed,
    MessageAdded,
    RunFinished,
    RunStarted,
)
from hermes_core.persistence import Store
from server.runs.observers import Observers
from server.sessions import journal


def test_the_journal_is_handed_only_the_kinds_it_writes_for() -> None:
    writing = {MessageAdded, RunFinished, RunStarted, CompressionPerformed}
    kept = journal.SessionJournal(cast(Store, None))
    routes = Observers([kept])
    handed = {kind for kind in get_args(AgentEvent) if routes.of(kind) == (kept,)}
    assert handed == writing  # a stream's deltas, tool progress and the rest never reach it
