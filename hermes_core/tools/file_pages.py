"""A text file as the file tools show it: lines decoded and cut to a readable length, and
the page of lines ``read_file`` returns, read from the file only as far as it needs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from hermes_core.tools.file_scan import Block, Budget, line_blocks

MAX_LINE_CHARS = 2000
"""A longer line is cut in ``read_file`` and ``search_files`` output."""


def decoded(line: bytes) -> str:
    return line.removesuffix(b"\r").decode("utf-8", errors="replace")


def clip_line(line: str, cut_from: int | None = None) -> str:
    """``line`` as shown; ``cut_from`` is the bytes it had when only its start was read."""
    if cut_from is not None:
        return f"{line[:MAX_LINE_CHARS]}… [line cut: {cut_from} bytes]"
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]}… [line cut: {len(line)} characters]"


@dataclasses.dataclass(slots=True)
class Page:
    """What ``read_page`` found: the rows to show, and how much of the file it saw."""

    rows: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    lines_seen: int = 0
    """Lines of the file read through (all of them when ``ended``)."""
    ended: bool = False
    """The whole file was read: ``lines_seen`` is its length."""


def read_page(descriptor: int, budget: Budget, offset: int, limit: int, *, room: int) -> Page:
    """Lines ``offset``… of the file, at most ``limit`` of them and ``room`` characters as
    shown; the file is read only as far as the page needs (and one chunk on, to tell whether
    it goes on)."""
    page = Page()
    used = 0
    width = len(str(offset + limit - 1))  # the widest line number the page could show
    blocks = line_blocks(descriptor, budget)
    for block in blocks:
        page.lines_seen = block.first_line - 1 + block.lines
        if page.lines_seen < offset:
            continue  # before the page: counted, never split
        full = False
        for number, line in _lines_from(block, offset):
            row = clip_line(decoded(line), block.cut.get(number))
            used += width + len(row) + 2
            full = len(page.rows) == limit or used > room
            if full:
                break
            page.rows.append((number, row))
        if full or len(page.rows) == limit:
            break
    else:
        page.ended = True
        return page
    page.ended = next(blocks, None) is None
    return page


def _lines_from(block: Block, offset: int) -> Iterator[tuple[int, bytes]]:
    skip = max(0, offset - block.first_line)
    lines = block.data.split(b"\n")[:-1]  # every line ends in \n: the last piece is empty
    for index in range(skip, len(lines)):
        yield block.first_line + index, lines[index]
