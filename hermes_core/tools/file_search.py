"""The model's regular expressions, run by RE2: time linear in the text, whatever the pattern.

Python's ``re`` backtracks: ``(a+)+$`` against forty ``a``\\ s and a ``!`` runs for hours, and
it holds the GIL while it does, so one search froze every tenant's requests. RE2 never
backtracks; what it gives up for that (backreferences, lookaround) is refused at compile time
with a message saying so. It also releases the GIL while it matches (measured: a thread
matching for 1 s left the loop thread running every millisecond), and ``search_files`` runs it
over blocks of whole lines of a bounded size (a longer line is matched on its start), and
refuses patterns that compile to large programs, so one match costs at most about a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2

from hermes_core.tools.file_scan import Block

MAX_PROGRAM_SIZE = 2000
_UNSUPPORTED = (
    "RE2 (the linear-time engine search_files uses) has no backreferences (\\1, (?P=name)) "
    "and no lookaround ((?=…), (?!…), (?<=…), (?<!…)); each line is matched on its own: end a "
    "pattern with $, not \\Z"
)


class LinePattern:
    """A compiled pattern that matches within single lines (``^`` and ``$`` at each line's
    ends; nothing matches across a newline)."""

    def __init__(self, source: str) -> None:
        options = re2.Options()
        options.log_errors = False  # the model reads the error; the server log need not
        options.never_nl = True
        try:
            # (?m): ^ and $ at line ends, as when a line is matched on its own.
            self._regex: Any = re2.compile(f"(?m){source}", options)
        except re2.error as exc:
            raise _refusal(exc, source) from exc
        # Linear time is still time × the program's size: RE2 runs a large program (as
        # [ab]{1000}[ab]{1000} makes) at about 1 s per 64 KiB line, in one call no deadline
        # can interrupt. Patterns people search with are well under a hundred.
        if self._regex.programsize > MAX_PROGRAM_SIZE:
            raise PatternError(
                f"'{source}' is too large to search with (RE2 compiles it to "
                f"{self._regex.programsize} instructions; at most {MAX_PROGRAM_SIZE}): use "
                "smaller repetition counts."
            )

    def matching_lines(self, block: Block) -> Iterator[tuple[int, bytes]]:
        """Each line of ``block`` the pattern matches somewhere in, with its number."""
        data = block.data
        number, counted_to, position = block.first_line, 0, 0
        while position < len(data):
            found = self._regex.search(data, position)
            if found is None or found.start() >= len(data):
                return
            start = data.rfind(b"\n", 0, found.start()) + 1
            end = data.find(b"\n", found.start())
            number += data.count(b"\n", counted_to, start)
            counted_to = start
            yield number, data[start:end]
            position = end + 1


class PatternError(ValueError):
    """A pattern RE2 cannot compile; ``str()`` is what the model reads."""


def _refusal(exc: Exception, source: str) -> PatternError:
    detail = exc.args[0] if exc.args else ""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    # RE2 quotes what it compiled: the pattern the model wrote, not our (?m) before it.
    detail = str(detail).replace(f"(?m){source}", source)
    unsupported = ("invalid escape sequence", "invalid perl operator", "invalid named capture")
    if detail.startswith(unsupported):
        return PatternError(
            f"'{source}' uses what RE2 does not support ({detail}). {_UNSUPPORTED}."
        )
    return PatternError(f"'{source}' is not a valid regular expression ({detail}).")
