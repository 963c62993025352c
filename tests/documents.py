"""Documents for tests: a PDF written by hand, DOCX/XLSX/PPTX made by the sandbox's data Python,
and a zip bomb; plus the check that the data environment is here (required in CI)."""

from __future__ import annotations

import os
import struct
import subprocess
import zipfile
import zlib
from pathlib import Path

import pytest

from hermes_core.tools.sandbox import sandbox_unavailable_reason
from hermes_core.tools.sandbox_python import environment_contents, python_environment

REQUIRED = ("pandas", "numpy", "matplotlib", "scipy", "openpyxl", "pypdf", "python_docx")


def require_data_python() -> Path:
    """The data environment's interpreter; skips without one (and without a sandbox), fails
    instead where the sandbox is required (CI: ``make test`` builds the environment)."""
    problem = sandbox_unavailable_reason()
    environment = python_environment()
    if problem is None and environment is None:
        problem = "no sandbox Python environment (make sandbox-python builds one)"
    if problem is None:
        installed = {name.lower() for name, _ in environment_contents().packages}
        missing = [name for name in REQUIRED if name not in installed]
        problem = f"the sandbox's Python lacks {', '.join(missing)}" if missing else None
    if problem is not None:
        if os.environ.get("HERMES_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox and its data Python are required here: {problem}")
        pytest.skip(problem)
    assert environment is not None
    return Path(environment.executable)


def pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF: one line of Helvetica text per page."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for index, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 18 Tf 72 720 Td ({escaped}) Tj ET"
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * index} 0 R >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


_OFFICE = """
import sys, docx, openpyxl, pptx
folder = sys.argv[1]
document = docx.Document()
document.add_heading("Quarterly report", 1)
document.add_paragraph("Revenue grew by 12 percent.")
table = document.add_table(rows=2, cols=2)
for index, text in enumerate(["region", "sales", "north", "42"]):
    table.cell(index // 2, index % 2).text = text
document.save(f"{folder}/report.docx")
book = openpyxl.Workbook()
sales = book.active
sales.title = "Sales"
sales.append(["region", "sales"])
sales.append(["north", 42])
costs = book.create_sheet("Costs")
costs.append(["item", "cost"])
costs.append(["rent", 7.5])
book.save(f"{folder}/report.xlsx")
deck = pptx.Presentation()
first = deck.slides.add_slide(deck.slide_layouts[1])
first.shapes.title.text = "Roadmap"
first.placeholders[1].text = "Ship the sandbox"
second = deck.slides.add_slide(deck.slide_layouts[5])
second.shapes.title.text = "Thanks"
deck.save(f"{folder}/report.pptx")
"""


def office_documents(python: Path, folder: Path) -> dict[str, Path]:
    """report.docx, report.xlsx and report.pptx in ``folder``, made with the data Python."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(python), "-c", _OFFICE, str(folder)], check=True, timeout=120)
    return {kind: folder / f"report.{kind}" for kind in ("docx", "xlsx", "pptx")}


def zip_bomb(path: Path, *, unpacked_mb: int = 1024, like: Path | None = None) -> Path:
    """A DOCX-named archive whose ``word/document.xml`` unpacks to ``unpacked_mb`` MB of one
    repeated byte (a few MB on disk; written in chunks, never held whole); with ``like``, the
    other parts of that real DOCX, so a reader gets as far as opening the big one."""
    if like is None:
        return _lone_zip_bomb(path, unpacked_mb)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        if like is not None:
            with zipfile.ZipFile(like) as model:
                for member in model.infolist():
                    if member.filename != "word/document.xml":
                        archive.writestr(member, model.read(member))
        with archive.open("word/document.xml", "w", force_zip64=True) as big:
            chunk = b"a" * (1024 * 1024)
            for _ in range(unpacked_mb):
                big.write(chunk)
    return path


def _lone_zip_bomb(path: Path, unpacked_mb: int) -> Path:
    """The archive with its one big member, a genuine one (its sizes and CRC are true; it
    unpacks in full), written without compressing ``unpacked_mb`` MB: zipfile would spend
    ~1.3 s of CPU per GB on it. Deflate flushed in full after a megabyte starts afresh, so
    that megabyte's compressed block, repeated, is the compressed stream of the repetition."""
    megabyte = b"a" * (1024 * 1024)
    compressor = zlib.compressobj(1, zlib.DEFLATED, -15)
    block = compressor.compress(megabyte) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(1, zlib.DEFLATED, -15).flush()  # the last, empty, block
    crc = 0
    for _ in range(unpacked_mb):
        crc = zlib.crc32(megabyte, crc)
    name = b"word/document.xml"
    sizes = struct.pack(
        "<III", crc, len(block) * unpacked_mb + len(end), len(megabyte) * unpacked_mb
    )
    # version 2.0, no flags, deflated, 1980-01-01 00:00
    common = struct.pack("<HHHHH", 20, 0, zipfile.ZIP_DEFLATED, 0, 0x21) + sizes
    with path.open("wb") as out:
        out.write(struct.pack("<I", 0x04034B50) + common + struct.pack("<HH", len(name), 0) + name)
        for _ in range(unpacked_mb):
            out.write(block)
        out.write(end)
        directory_at = out.tell()
        directory = (
            struct.pack("<IH", 0x02014B50, 20)
            + common
            + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, 0)
            + name
        )
        out.write(directory)
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(directory), directory_at, 0))
    return path
