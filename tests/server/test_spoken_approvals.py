"""How a chat user's words in the turn after a question are read as an answer to it."""

from __future__ import annotations

import pytest

from server.runs.approvals import parse_spoken_answer


@pytest.mark.parametrize("words", ["approve", "Yes", "ok, go ahead", "Approved!"])
def test_a_clear_yes_approves_once(words: str) -> None:
    assert parse_spoken_answer(words) == ("approved", "once")


@pytest.mark.parametrize(
    "words", ["approve for this session", "yes, always", "allow for the whole conversation"]
)
def test_a_yes_for_the_session_approves_for_the_session(words: str) -> None:
    assert parse_spoken_answer(words) == ("approved", "session")


@pytest.mark.parametrize(
    "words",
    [
        "deny",
        "no",
        "",
        "what would that delete?",
        "I don't approve",
        "yes but first explain to me in detail what every one of these files is for",
    ],
)
def test_anything_but_a_clear_yes_is_a_denial(words: str) -> None:
    assert parse_spoken_answer(words) == ("denied", "once")
