"""Run inside the sandbox, by the data environment's Python: the text of one document.

``python3 -I -c <this file> KIND FD MAX_BYTES`` reads the document from the inherited,
read-only descriptor ``FD`` (the sandbox has no path to it) and writes its text to stdout,
with ``--- page N ---``, ``--- sheet: name ---`` and ``--- slide N ---`` markers, stopping after
``MAX_BYTES``. A document it cannot read ends it with one line ``ERROR_MARK message`` and exit
code 3. The server never imports this module: its source is sent as the ``-c`` argument, so
nothing of the server's tree has to be visible in the sandbox. Only the standard library is
imported at the top: the document libraries exist in the sandbox's environment alone (so they
are imported by name, when a document needs them).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import warnings
import zipfile
from collections.abc import Iterable
from typing import Any, BinaryIO

ERROR_MARK = "\x00hermes-document-error:"
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
"""A DOCX, XLSX or PPTX (zip archives) declaring more than this unpacked is refused unread: a
zip bomb would otherwise fill the sandbox's memory before the limits stop it."""
MAX_MEMBERS = 20_000


class Unreadable(Exception):
    """The document cannot be read; the message says why, for the model."""


class Full(Exception):
    """The text reached its size limit."""


class Text:
    """The text written so far, held to ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.written = 0

    def line(self, text: str) -> None:
        data = (text.replace("\x00", "") + "\n").encode("utf-8", "replace")
        if self.written + len(data) > self.limit:
            sys.stdout.buffer.write(data[: max(0, self.limit - self.written)])
            sys.stdout.buffer.write(
                f"\n[… the text goes on: stopped after {self.limit} bytes]\n".encode()
            )
            raise Full
        self.written += len(data)
        sys.stdout.buffer.write(data)

    def lines(self, text: str) -> None:
        for line in text.splitlines():
            self.line(line)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("\n", " ").replace("|", "\\|")


def _row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(rows: Iterable[list[Any]], out: Text) -> None:
    """Rows as a Markdown table: the first row as its header."""
    first = True
    for cells in rows:
        out.line(_row(cells))
        if first:
            out.line("|" + "---|" * max(1, len(cells)))
            first = False


def _check_archive(source: BinaryIO) -> None:
    try:
        with zipfile.ZipFile(source) as archive:
            members = archive.infolist()
    except zipfile.BadZipFile as exc:
        raise Unreadable(f"it is not a valid Office document (not a zip archive: {exc})") from exc
    unpacked = sum(member.file_size for member in members)
    if len(members) > MAX_MEMBERS or unpacked > MAX_UNPACKED_BYTES:
        raise Unreadable(
            f"it unpacks to {unpacked // (1024 * 1024)} MB in {len(members)} parts, more than "
            f"the {MAX_UNPACKED_BYTES // (1024 * 1024)} MB a document may"
        )
    source.seek(0)


def pdf(source: BinaryIO, out: Text) -> None:
    pypdf = importlib.import_module("pypdf")

    reader = pypdf.PdfReader(source)
    if reader.is_encrypted and not reader.decrypt(""):
        raise Unreadable("it is encrypted with a password")
    for number, page in enumerate(reader.pages, 1):
        out.line(f"--- page {number} ---")
        out.lines(page.extract_text() or "")


def docx(source: BinaryIO, out: Text) -> None:
    python_docx = importlib.import_module("docx")

    document = python_docx.Document(source)
    for block in document.iter_inner_content():
        if hasattr(block, "rows"):  # a table
            _table(([cell.text for cell in row.cells] for row in block.rows), out)
            continue
        style = (block.style.name if block.style is not None else "") or ""
        level = style.removeprefix("Heading ").strip()
        prefix = "#" * int(level) + " " if style.startswith("Heading") and level.isdigit() else ""
        out.lines(prefix + block.text) if block.text else out.line("")


def xlsx(source: BinaryIO, out: Text) -> None:
    openpyxl = importlib.import_module("openpyxl")

    book = openpyxl.load_workbook(source, read_only=True, data_only=True)
    for sheet in book.worksheets:
        out.line(f"--- sheet: {sheet.title} ---")
        _table(_filled_rows(sheet), out)


def _filled_rows(sheet: Any) -> Iterable[list[Any]]:
    """The sheet's rows that hold anything, without their empty cells at the end."""
    for values in sheet.iter_rows(values_only=True):
        cells = list(values)
        while cells and cells[-1] is None:
            cells.pop()
        if cells:
            yield cells


def pptx(source: BinaryIO, out: Text) -> None:
    python_pptx = importlib.import_module("pptx")

    presentation = python_pptx.Presentation(source)
    for number, slide in enumerate(presentation.slides, 1):
        out.line(f"--- slide {number} ---")
        for shape in slide.shapes:
            if getattr(shape, "has_text_frame", False) and shape.text_frame.text:
                out.lines(shape.text_frame.text)
            if getattr(shape, "has_table", False):
                table = shape.table
                _table(([cell.text for cell in row.cells] for row in table.rows), out)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text
            if notes:
                out.line("notes:")
                out.lines(notes)


EXTRACTORS = {"pdf": pdf, "docx": docx, "xlsx": xlsx, "pptx": pptx}


def main(argv: list[str]) -> int:
    kind, descriptor, limit = argv[1], int(argv[2]), int(argv[3])
    # Libraries' warnings and logs are not the document's text (stderr shares the pipe).
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    source = os.fdopen(descriptor, "rb", closefd=False)
    source.seek(0)  # the descriptor's offset is shared with whoever opened it
    out = Text(limit)
    try:
        if kind != "pdf":
            _check_archive(source)
        EXTRACTORS[kind](source, out)
    except Full:
        pass
    except Unreadable as exc:
        return _fail(str(exc))
    except MemoryError:
        return _fail("reading it needs more memory than a document may use")
    except RecursionError:
        return _fail("it is nested too deeply to read")
    except ImportError as exc:
        return _fail(f"the sandbox's Python lacks {exc.name or 'a library'} to read it")
    except Exception as exc:  # a malformed document: the parser's words, briefly
        return _fail(f"it is not a readable {kind.upper()} ({type(exc).__name__}: {exc})"[:500])
    sys.stdout.flush()
    return 0


def _fail(message: str) -> int:
    sys.stdout.flush()
    sys.stdout.buffer.write(f"\n{ERROR_MARK} {message}\n".encode("utf-8", "replace"))
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
