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


_COMMON_WORDS = """\
a about above after again all also am an and any are as at be been before being below
between both but by can could did do does doing down during each few for from further had
has have having he her here hers him his how i if in into is it its just me more most my
no nor not now of off on once only or other our out over own same she should so some such
than that the their them then there these they this those through to too under until up
very was we were what when where which while who whom why will with would you your"""
STOPWORDS = frozenset(_COMMON_WORDS.split())
"""Words too common to say what a message is about: a recall by any word leaves them out."""


def topic_terms(query: str) -> list[str]:
    """The query's words that say what it is about: its terms less the commonest words and
    those of one or two letters."""
    return [term for term in query_terms(query) if len(term) > 2 and term not in STOPWORDS]


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
