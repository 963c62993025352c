"""The spreadsheet walk-through over Chat Completions, against a real server process: the
user uploads an XLSX, the agent reads it with pandas and draws ``chart.png`` with matplotlib
in the sandbox, and the answer announces the chart, and only the chart: not the font caches
matplotlib's first figure leaves in the workspace (the sandbox's home)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.documents import require_data_python
from tests.server.served import sse_data
from tests.server.tools.conftest import MODEL, ToolServer, answer, call, script, tool_results

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

ANALYSE = (
    "import pandas as pd\n"
    "import matplotlib.pyplot as plt\n"
    "sales = pd.read_excel('sales.xlsx')\n"
    "print('total', sales['sales'].sum())\n"
    "sales.plot(x='month', y='sales')\n"
    "plt.savefig('chart.png')\n"
)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def spreadsheet(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """sales.xlsx, as the data Python's pandas writes it."""
    python = require_data_python()
    path = tmp_path_factory.mktemp("xlsx") / "sales.xlsx"
    write = (
        "import pandas as pd, sys\n"
        "pd.DataFrame({'month': ['jan', 'feb', 'mar'], 'sales': [120, 135, 150]})"
        ".to_excel(sys.argv[1], index=False)\n"
    )
    subprocess.run([str(python), "-c", write, str(path)], check=True, timeout=120)
    return Path(path).read_bytes()


def _asking(file_id: str) -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Chart the sales."},
                {"type": "file", "file": {"file_id": file_id}},
            ],
        }
    ]


async def test_a_chat_answer_announces_the_chart_the_agent_drew_from_a_spreadsheet_and_no_cache(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    spreadsheet: bytes,
) -> None:
    uploaded = await openai.files.create(file=("sales.xlsx", spreadsheet), purpose="user_data")
    script(simulator, call("code", code=ANALYSE), answer("Sales grow; see chart.png."))

    completion = await openai.chat.completions.create(
        model=MODEL,
        messages=_asking(uploaded.id),
        extra_headers={"x-hermes-session-id": "xlsx-chart"},
    )

    assert "total 405" in tool_results(simulator)[0]
    annotations = completion.choices[0].message.model_dump()["annotations"]
    assert [a["container_file_citation"]["filename"] for a in annotations] == ["chart.png"]
    cited = annotations[0]["container_file_citation"]
    chart = await openai.containers.files.content.retrieve(
        cited["file_id"], container_id=cited["container_id"]
    )
    assert chart.content.startswith(PNG)
    async with httpx.AsyncClient() as browser:  # the signed link needs no key
        shown = await browser.get(annotations[0]["url_citation"]["url"])
    assert shown.content == chart.content
    listed = await openai.containers.files.list(cited["container_id"])
    assert sorted(f.path for f in listed.data) == ["chart.png", "sales.xlsx"]


async def test_open_webui_shows_the_chart_from_a_spreadsheet_inline_and_no_cache_file(
    tool_server: ToolServer,
    simulator: SimulatorServer,
    openai: AsyncOpenAI,
    http: httpx.AsyncClient,
    spreadsheet: bytes,
) -> None:
    uploaded = await openai.files.create(file=("sales.xlsx", spreadsheet), purpose="user_data")
    script(simulator, call("code", code=ANALYSE), answer("Here it is."))

    streamed = await http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "stream": True, "messages": _asking(uploaded.id)},
        headers={"x-openwebui-chat-id": "xlsx-chart-owui"},
    )

    text = "".join(
        choice["delta"].get("content") or ""
        for chunk in sse_data(streamed.text)
        for choice in chunk.get("choices", [])
    )
    shown = text.partition("Here it is.")[2]  # what follows the model's answer
    assert shown.count("](") == 1
    assert "![chart.png](" in shown
