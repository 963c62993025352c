"""Text a database cannot hold, found and replaced.

Two kinds of character can reach Python strings that no store round-trips: a lone surrogate
(``"\\ud800"`` is valid JSON, and the standard library's parser accepts it, but UTF-8 has no
encoding for it, so neither the JSON encoder nor any driver can write it) and NUL (PostgreSQL
refuses it in ``text`` and JSON). Clients that send them are refused at the server's door;
what arrives another way (a model's output, a tool's) is stored with each such character
replaced by U+FFFD, rather than lost (see :mod:`hermes_core.persistence.writer`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""NUL and the surrogate code points. A surrogate *pair* decodes to one code point above
U+FFFF, so any surrogate left in a ``str`` is a lone one."""

REPLACEMENT = "\ufffd"


def holds_unstorable(value: Any) -> bool:
    """Whether ``value`` (a string, or JSON-like data holding strings, keys included) holds a
    character :data:`UNSTORABLE` matches."""
    return first_unstorable(value) is not None


def first_unstorable(value: Any) -> str | None:
    """The first character of ``value`` that :data:`UNSTORABLE` matches, if any."""
    if isinstance(value, str):
        found = UNSTORABLE.search(value)
        return found.group() if found else None
    if isinstance(value, Mapping):
        items: Any = (text for pair in value.items() for text in pair)
    elif isinstance(value, list | tuple):
        items = value
    else:
        return None
    for item in items:
        if (found_in := first_unstorable(item)) is not None:
            return found_in
    return None


def storable(value: Any) -> Any:
    """A copy of ``value`` with every unstorable character replaced by U+FFFD."""
    if isinstance(value, str):
        return UNSTORABLE.sub(REPLACEMENT, value)
    if isinstance(value, Mapping):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value
