"""Which web sources an answer cites, and where: the ``url_citation`` annotations.

A source is cited where the answer names its URL — bare, or as the target of a Markdown link
(``[title](url)``, the whole link being the cited span). Sources the answer never names are
not annotated: an annotation says "this text rests on that page", which the server can only
claim where the model pointed at it. Open WebUI still shows every page the agent read as a
source chip (see the chat view).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hermes_core.events import Source, SourcesFound


@dataclass(frozen=True, slots=True)
class Citation:
    url: str
    title: str
    start_index: int
    end_index: int
    """One past the span's last character, as Python slices (and OpenAI's examples) count."""

    def responses_annotation(self) -> dict[str, Any]:
        """As a Responses ``output_text`` annotation."""
        return {
            "type": "url_citation",
            "url": self.url,
            "title": self.title,
            "start_index": self.start_index,
            "end_index": self.end_index,
        }

    def chat_annotation(self) -> dict[str, Any]:
        """As a chat ``message.annotations`` entry (the same fields, nested)."""
        return {
            "type": "url_citation",
            "url_citation": {
                "url": self.url,
                "title": self.title,
                "start_index": self.start_index,
                "end_index": self.end_index,
            },
        }


class SourceList:
    """The sources a run's tools found so far, one per URL (a page read beats a listing)."""

    def __init__(self) -> None:
        self._by_url: dict[str, Source] = {}
        self._read: set[str] = set()

    def add(self, event: SourcesFound) -> list[Source]:
        """Record ``event``'s sources; return those it adds (pages newly read, for a read)."""
        new = []
        for source in event.sources:
            if event.read:
                if source.url not in self._read:
                    new.append(source)
                    self._read.add(source.url)
                    self._by_url[source.url] = source
            elif source.url not in self._by_url:
                new.append(source)
                self._by_url[source.url] = source
        return new

    def __bool__(self) -> bool:
        return bool(self._by_url)

    def was_read(self, url: str) -> bool:
        return url in self._read

    def cite(self, text: str) -> list[Citation]:
        return cite(text, self._by_url.values())


def cite(text: str, sources: Iterable[Source]) -> list[Citation]:
    """Every place ``text`` names one of ``sources``, in text order, spans never overlapping."""
    found: list[Citation] = []
    for source in sources:
        for start, end in _mentions(text, source.url):
            found.append(Citation(source.url, source.title or source.url, start, end))
    found.sort(key=lambda c: (c.start_index, -c.end_index))
    kept: list[Citation] = []
    for citation in found:
        # A longer URL containing a shorter one (…/a and …/a/b) is cited once, as the longer.
        if kept and citation.start_index < kept[-1].end_index:
            continue
        kept.append(citation)
    return kept


def _mentions(text: str, url: str) -> Iterable[tuple[int, int]]:
    """Spans naming ``url``: its occurrences (with or without a trailing slash), widened to
    the whole Markdown link when it is one's target."""
    needle = url.rstrip("/") if len(url.rstrip("/")) > len("https://") else url
    start = text.find(needle)
    while start != -1:
        end = start + len(needle)
        if text.startswith("/", end) and url.endswith("/"):
            end += 1
        if _ends_url(text, end):
            yield _widened_to_link(text, start, end)
        start = text.find(needle, end)


def _ends_url(text: str, end: int) -> bool:
    """The URL is not the start of a longer one (``…/page`` inside ``…/pages``)."""
    return end >= len(text) or not (text[end].isalnum() or text[end] in "/-_%~+=&?#")


def _widened_to_link(text: str, start: int, end: int) -> tuple[int, int]:
    if text[start - 2 : start] != "](" or not text.startswith(")", end):
        return start, end
    opening = text.rfind("[", 0, start - 2)
    if opening == -1 or "\n" in text[opening:start]:
        return start, end
    return opening, end + 1
