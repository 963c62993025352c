"""What full-text search sees of a message, and the snippet shown around a match.

Shared by the in-memory index and the SQL store, so moving between them does not change what
the model finds.
"""

from __future__ import annotations

import re

from hermes_core.messages import Message, text_of

WORD = re.compile(r"\w+")
SNIPPET_CHARS = 80
"""Length of a search snippet (before the ellipses marking a cut)."""


def searchable_text(message: Message) -> str:
    """Content, tool names and arguments, whitespace collapsed."""
    parts = [text_of(message.get("content"))]
    for call in message.get("tool_calls", []):
        function = call.get("function", {})
        parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return " ".join(" ".join(parts).split())


def query_terms(query: str) -> list[str]:
    """The distinct lower-cased words of a query, in order."""
    return list(dict.fromkeys(word.lower() for word in WORD.findall(query)))


def words_of(text: str) -> frozenset[str]:
    return frozenset(word.lower() for word in WORD.findall(text))


def snippet(text: str, terms: list[str]) -> str:
    """About ``SNIPPET_CHARS`` of ``text`` around the first match of any term."""
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(t) for t in terms) + r")\b", re.I)
    found = pattern.search(text)
    position = found.start() if found else 0
    # Put the match about a third of the way in: some lead-in, more of what follows.
    start = max(0, min(position - SNIPPET_CHARS // 3, len(text) - SNIPPET_CHARS))
    end = start + SNIPPET_CHARS
    return ("…" if start > 0 else "") + text[start:end] + ("…" if end < len(text) else "")
