"""Documents as text: ``read_file`` of a PDF, DOCX, XLSX and PPTX gives their text with page,
sheet and slide markers, extracted in the sandbox under limits that stop a hostile document
with a reason the model can read."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_core.tools import documents
from hermes_core.tools.documents import (
    DOCUMENT_LIMITS,
    DocumentUnreadable,
    document_kind,
    extract_text,
)
from hermes_core.tools.files import read_file
from hermes_core.tools.registry import ToolContext
from hermes_core.tools.sandbox import SandboxPolicy
from tests.documents import office_documents, pdf, require_data_python, zip_bomb


@pytest.fixture(scope="module")
def data_python() -> Path:
    return require_data_python()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


def read(workspace: Path, path: str, **arguments: object) -> str:
    context = ToolContext(
        run_id="r", task_id="t", call_id="c", is_interrupted=lambda: False, workspace=workspace
    )
    return str(read_file({"path": path, **arguments}, context))


def extract(path: Path, kind: str, **limits: object) -> str:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        bounds = dataclasses.replace(DOCUMENT_LIMITS, **limits)  # type: ignore[arg-type]
        return asyncio.run(extract_text(descriptor, kind, policy=SandboxPolicy(), limits=bounds))
    finally:
        os.close(descriptor)


def test_a_pdf_is_read_as_its_text_page_by_page(data_python: Path, workspace: Path) -> None:
    (workspace / "report.pdf").write_bytes(pdf(["Revenue grew", "Costs fell (a bit)"]))

    shown = read(workspace, "report.pdf")

    assert shown.splitlines() == [
        "1\t--- page 1 ---",
        "2\tRevenue grew",
        "3\t--- page 2 ---",
        "4\tCosts fell (a bit)",
    ]


def test_office_documents_are_read_with_their_sheet_and_slide_markers(
    data_python: Path, workspace: Path
) -> None:
    office_documents(data_python, workspace)

    docx, xlsx, pptx = (read(workspace, f"report.{kind}") for kind in ("docx", "xlsx", "pptx"))

    assert "# Quarterly report" in docx
    assert "Revenue grew by 12 percent." in docx
    assert "| north | 42 |" in docx
    assert xlsx.splitlines() == [
        "1\t--- sheet: Sales ---",
        "2\t| region | sales |",
        "3\t|---|---|",
        "4\t| north | 42 |",
        "5\t--- sheet: Costs ---",
        "6\t| item | cost |",
        "7\t|---|---|",
        "8\t| rent | 7.5 |",
    ]
    assert [line.split("\t")[1] for line in pptx.splitlines()] == [
        "--- slide 1 ---",
        "Roadmap",
        "Ship the sandbox",
        "--- slide 2 ---",
        "Thanks",
    ]


def test_a_long_document_comes_in_pages_like_a_text_file(
    data_python: Path, workspace: Path
) -> None:
    (workspace / "long.pdf").write_bytes(pdf([f"text of page {n}" for n in range(1, 31)]))

    first = read(workspace, "long.pdf", limit=10)
    later = read(workspace, "long.pdf", offset=11, limit=4)

    assert first.splitlines()[-1] == "[… showing lines 1–10 of 60; read on with offset=11]"
    assert later.splitlines()[:4] == [
        "11\t--- page 6 ---",
        "12\ttext of page 6",
        "13\t--- page 7 ---",
        "14\ttext of page 7",
    ]


def test_a_pdf_named_otherwise_is_still_read_as_a_document() -> None:
    assert document_kind("scan.bin", b"%PDF-1.7") == "pdf"
    assert document_kind("table.csv", b"a,b\n") is None
    assert document_kind("Deck.PPTX") == "pptx"


def test_a_zip_bomb_is_refused_unread_with_why(data_python: Path, workspace: Path) -> None:
    zip_bomb(workspace / "bomb.docx", unpacked_mb=1024)

    shown = read(workspace, "bomb.docx")

    assert shown.startswith("Error: it unpacks to 1024 MB")


def test_a_document_needing_more_memory_than_its_limit_is_stopped_with_why(
    data_python: Path, tmp_path: Path
) -> None:
    real = office_documents(data_python, tmp_path / "real")["docx"]
    bomb = zip_bomb(tmp_path / "heavy.docx", unpacked_mb=200, like=real)  # under the guard

    with pytest.raises(DocumentUnreadable, match="memory"):
        extract(bomb, "docx", memory_bytes=160 * 1024**2, sandbox_memory_bytes=160 * 1024**2)


def test_a_document_taking_longer_than_its_limit_is_stopped_with_why(
    data_python: Path, tmp_path: Path
) -> None:
    (tmp_path / "slow.pdf").write_bytes(pdf(["anything"]))

    with pytest.raises(DocumentUnreadable, match=r"longer than the 0.05 s"):
        extract(tmp_path / "slow.pdf", "pdf", timeout_seconds=0.05)


def test_a_malformed_document_says_it_is_not_readable(data_python: Path, workspace: Path) -> None:
    (workspace / "broken.pdf").write_bytes(b"%PDF-1.4\nnot really a pdf at all\n")
    (workspace / "broken.xlsx").write_bytes(b"PK\x03\x04 nothing more")

    assert read(workspace, "broken.pdf").startswith("Error: it is not a readable PDF")
    assert read(workspace, "broken.xlsx").startswith("Error: it is not a valid Office document")


@pytest.fixture
def no_sandbox() -> Iterator[None]:
    saved = list(documents._sandbox_probe)
    documents._sandbox_probe[:] = ["'bwrap' is not installed"]
    yield
    documents._sandbox_probe[:] = saved


def test_without_a_sandbox_documents_cannot_be_read_and_it_says_so(
    no_sandbox: None, workspace: Path
) -> None:
    (workspace / "report.pdf").write_bytes(pdf(["secret"]))

    shown = read(workspace, "report.pdf")

    assert shown == (
        "Error: documents (PDF, DOCX, XLSX, PPTX) cannot be read on this server: it has no "
        "sandbox to parse them in safely ('bwrap' is not installed)"
    )


def test_a_csv_export_that_is_not_utf8_is_still_read_as_text(workspace: Path) -> None:
    (workspace / "export.csv").write_bytes("city,temp\nZürich,4\n".encode("latin-1"))

    assert read(workspace, "export.csv").splitlines() == ["1\tcity,temp", "2\tZ\ufffdrich,4"]
