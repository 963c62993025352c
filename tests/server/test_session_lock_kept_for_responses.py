"""A run whose responses are saved once it has ended keeps its conversation's turn lock until
each is saved (the journal, on a real SQLite store): no change of the conversation (a deleted
item moving the ends of its responses) can come between the run's end and a save that says
where the run ended, and overwrite it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hermes_core.persistence import Store, sqlite_url
from server.runs.manager import RunInfo
from server.sessions.journal import SessionJournal
from tests.server.run_endings import ending_of

CONVERSATION = ("alice", "conv_1")
LEASE_SECONDS = 60.0


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(sqlite_url(tmp_path / "hermes.db"), migrate=True)
    try:
        yield opened
    finally:
        await opened.close()


async def _changeable(store: Store) -> bool:
    """Whether a change of the conversation can take its turn now (and gives it back)."""
    await store.db.writer.flush()
    taken = await store.sessions.lock(*CONVERSATION, "change_1", lease_seconds=LEASE_SECONDS)
    if taken:
        store.sessions.unlock(*CONVERSATION, "change_1")
        await store.db.writer.flush()
    return taken


async def _running(store: Store, journal: SessionJournal, *, kept: bool) -> RunInfo:
    """A run holding the conversation's turn, tracked by ``journal``."""
    assert await store.sessions.lock(*CONVERSATION, "run_1", lease_seconds=LEASE_SECONDS)
    journal.track("run_1", "sess_1", lock=CONVERSATION, kept=kept)
    return RunInfo(id="run_1", owner="alice", endpoint="responses", model="hermes-agent")


async def test_a_runs_turn_is_given_back_when_it_ends_unless_a_response_is_to_be_saved(
    store: Store,
) -> None:
    journal = SessionJournal(store)
    run = await _running(store, journal, kept=False)

    journal(run, ending_of("run_1", []))

    assert await _changeable(store)


async def test_a_runs_turn_is_kept_past_its_end_until_each_of_its_responses_is_saved(
    store: Store,
) -> None:
    journal = SessionJournal(store)
    run = await _running(store, journal, kept=True)
    assert journal.keep("run_1")  # a response steered into the run: one more save to come

    journal(run, ending_of("run_1", []))
    assert not await _changeable(store)
    assert not journal.release("run_1")  # the run's own response is saved
    assert not await _changeable(store)
    assert journal.release("run_1")  # the steered one's too

    assert await _changeable(store)
    assert not journal.keep("run_1")  # nothing left to keep it for
