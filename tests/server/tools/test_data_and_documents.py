"""Data work and documents through a real server process: the ``code`` tool analyses a CSV with
pandas and draws a chart with matplotlib (headless, no writable home), and ``read_file`` gives
PDF, DOCX, XLSX and PPTX files as text; a hostile document is stopped with a reason, and the
server goes on serving."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.documents import office_documents, pdf, require_data_python, zip_bomb
from tests.server.tools.conftest import (
    MODEL,
    ToolServer,
    answer,
    call,
    calls,
    script,
    tool_results,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

ANALYSE = """
import pandas as pd
import matplotlib.pyplot as plt
frame = pd.read_csv("sales.csv")
print("mean", frame["total"].mean())
frame.plot.bar(x="region", y="total")
plt.savefig("chart.png")
print("backend", plt.get_backend())
"""


@pytest.fixture(scope="module")
def data_python() -> Path:
    return require_data_python()


def _workspace(tool_server: ToolServer, conversation: str) -> Path:
    workspace = tool_server.workspace(conversation)
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace


async def test_the_code_tool_analyses_a_csv_with_pandas_and_draws_a_chart(
    data_python: Path, tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    workspace = _workspace(tool_server, "data-work")
    (workspace / "sales.csv").write_text("region,total\nnorth,12\nsouth,30\n")
    script(simulator, call("code", code=ANALYSE), answer("Done."))

    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Chart the sales."}],
        extra_headers={"x-hermes-session-id": "data-work"},
    )

    result = tool_results(simulator)[0]
    assert result.startswith("[exit code 0;"), result
    assert "mean 21.0" in result
    assert "backend agg" in result.lower()
    assert (workspace / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_read_file_gives_documents_as_text_with_their_markers(
    data_python: Path, tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    workspace = _workspace(tool_server, "documents")
    (workspace / "report.pdf").write_bytes(pdf(["Revenue grew", "Costs fell"]))
    office_documents(data_python, workspace)
    reads = [("read_file", {"path": f"report.{kind}"}) for kind in ("pdf", "docx", "xlsx", "pptx")]
    script(simulator, calls(*reads), answer("Read them all."))

    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Read the reports."}],
        extra_headers={"x-hermes-session-id": "documents"},
    )

    shown_pdf, shown_docx, shown_xlsx, shown_pptx = tool_results(simulator)
    assert "1\t--- page 1 ---\n2\tRevenue grew\n3\t--- page 2 ---\n4\tCosts fell" in shown_pdf
    assert "Revenue grew by 12 percent." in shown_docx
    assert "--- sheet: Sales ---" in shown_xlsx
    assert "--- sheet: Costs ---" in shown_xlsx
    assert "| rent | 7.5 |" in shown_xlsx
    assert "--- slide 1 ---" in shown_pptx
    assert "Ship the sandbox" in shown_pptx


async def test_a_hostile_document_is_stopped_with_why_and_the_server_keeps_serving(
    data_python: Path,
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
) -> None:
    workspace = _workspace(tool_server, "hostile")
    zip_bomb(workspace / "bomb.xlsx", unpacked_mb=2048)
    script(simulator, call("read_file", path="bomb.xlsx"), answer("It would not open."))

    await openai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Open the spreadsheet."}],
        extra_headers={"x-hermes-session-id": "hostile"},
    )

    assert tool_results(simulator)[0] == (
        "Error: it unpacks to 2048 MB in 1 parts, more than the 256 MB a document may"
    )
    assert tool_server.alive()
    assert (await http.get("/health")).status_code == 200
