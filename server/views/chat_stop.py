"""A chat client's ``stop`` sequences, applied to the answer it is shown.

OpenAI's model stops generating at a stop sequence; an agent's answer comes from several model
calls (and its tools' work), so the sequences are not passed upstream, where they would cut a
step short, but applied to the answer text the client sees: it ends before the first of them,
the sequence not included, as OpenAI's does. The run itself goes on to its end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def cut_at_stop(text: str, sequences: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first of ``sequences``, and whether one was found."""
    found = [index for index in (text.find(s) for s in sequences) if index >= 0]
    if not found:
        return text, False
    return text[: min(found)], True


@dataclass(slots=True)
class StopCut:
    """The streamed answer, cut at the first stop sequence: a delta's tail that may begin one
    is held back until the next delta says whether it does."""

    sequences: tuple[str, ...]
    _held: str = ""
    stopped: bool = False
    """A stop sequence was found: nothing more of the answer is shown."""

    def feed(self, text: str) -> str:
        """What of the answer, with ``text`` added, may be shown now."""
        if self.stopped:
            return ""
        text = self._held + text
        shown, self.stopped = cut_at_stop(text, self.sequences)
        if self.stopped:
            self._held = ""
            return shown
        # Only text past the start of any match may be held: what was shown cannot begin one.
        keep = max(_prefix_at_end(text, s) for s in self.sequences)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The text held back, at the answer's end: no stop sequence followed it."""
        held, self._held = self._held, ""
        return held


def _prefix_at_end(text: str, sequence: str) -> int:
    """The length of the longest proper prefix of ``sequence`` that ``text`` ends with."""
    for length in range(min(len(sequence) - 1, len(text)), 0, -1):
        if text.endswith(sequence[:length]):
            return length
    return 0
