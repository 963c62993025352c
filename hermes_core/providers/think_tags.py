"""Reasoning that a model writes into its answer between ``<think>`` tags.

Local reasoning models served without a reasoning parser (Ollama, llama.cpp, vLLM as
configured by default) put their thinking at the start of ``content``:
``<think>…</think>The answer``. It is reasoning — shown where reasoning goes, never as answer
text, never stored as the answer. Only a block at the very start of a reply counts (a tag
further on is text the model means, e.g. in code); tags split across chunks are handled.
"""

from __future__ import annotations

from typing import Literal

OPENING_TAGS = ("<think>", "<thinking>", "<reasoning>", "<thought>")

Piece = tuple[bool, str]
"""(is reasoning, text)."""


class ThinkTags:
    """Splits one reply's text, chunk by chunk, into reasoning and answer pieces."""

    def __init__(self) -> None:
        self._state: Literal["start", "inside", "after", "answer"] = "start"
        self._held = ""
        """Text that may still be (the start of) a tag."""
        self._closing = ""

    @property
    def settled(self) -> bool:
        """Past any think block: every later chunk is answer text, as it is."""
        return self._state == "answer"

    def feed(self, text: str) -> list[Piece]:
        if self._state == "start":
            return self._at_start(text)
        if self._state == "inside":
            return self._inside(text)
        if self._state == "after":
            text = text.lstrip()
            if not text:
                return []
            self._state = "answer"
        return [(False, text)]

    def flush(self) -> list[Piece]:
        """What is still held when the reply ends."""
        held, self._held = self._held, ""
        if not held:
            return []
        # An unclosed think block is all reasoning; a would-be tag that never completed is text.
        return [(self._state == "inside", held)]

    def _at_start(self, text: str) -> list[Piece]:
        held = self._held + text
        stripped = held.lstrip()
        if not stripped:
            self._held = held
            return []
        for tag in OPENING_TAGS:
            if stripped.startswith(tag):
                self._state, self._held = "inside", ""
                self._closing = "</" + tag[1:]
                return self._inside(stripped[len(tag) :])
        if any(tag.startswith(stripped) for tag in OPENING_TAGS):
            self._held = held
            return []
        self._state, self._held = "answer", ""
        return [(False, held)]

    def _inside(self, text: str) -> list[Piece]:
        held = self._held + text
        end = held.find(self._closing)
        if end >= 0:
            self._held = ""
            self._state = "after"
            pieces: list[Piece] = [(True, held[:end])] if held[:end] else []
            return pieces + self.feed(held[end + len(self._closing) :])
        keep = _partial_suffix(held, self._closing)
        self._held = held[len(held) - keep :] if keep else ""
        thought = held[: len(held) - keep]
        return [(True, thought)] if thought else []


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of ``text`` that is a beginning of ``tag``."""
    for length in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-length:]):
            return length
    return 0
