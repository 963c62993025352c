"""Recalling earlier sessions for a new message (``agent/episodes.py``): by the words that say
what the message is about, the sessions holding most of them first, one owner's only."""

from __future__ import annotations

from hermes_core.agent.episodes import RECALL_HEADER, recall
from hermes_core.memory_stores import InMemorySessionIndex


def _index() -> InMemorySessionIndex:
    index = InMemorySessionIndex()
    index.add_session(
        "alice",
        "old",
        "launch",
        [
            {"role": "user", "content": "The launch codename is BLUEBIRD."},
            {"role": "assistant", "content": "Noted."},
        ],
    )
    index.add_session(
        "alice",
        "newer",
        "party",
        [{"role": "user", "content": "Plan the launch party for Friday."}],
    )
    index.add_session("bob", "bobs", "bob", [{"role": "user", "content": "codename FALCON"}])
    return index


async def test_the_session_holding_most_topic_words_comes_first() -> None:
    note = await recall(
        _index(), "alice", "What was the codename of the launch?", limit=2, exclude=None
    )

    assert note is not None
    assert note.startswith(RECALL_HEADER)
    assert note.index("BLUEBIRD") < note.index("launch party")


async def test_common_words_alone_recall_nothing() -> None:
    assert await recall(_index(), "alice", "What is it that you do?", limit=2, exclude=None) is None


async def test_the_current_session_and_other_owners_are_left_out() -> None:
    note = await recall(_index(), "alice", "codename launch", limit=5, exclude="old")

    assert note is not None
    assert "BLUEBIRD" not in note
    assert "FALCON" not in note


async def test_a_recall_by_every_word_still_needs_every_word() -> None:
    hits = await _index().search("alice", "codename party", limit=5)

    assert hits == []
