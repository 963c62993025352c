"""The seeds' own walk-through of a request, end to end against a real server process: the user
uploads a CSV and a PDF with the Files API and asks for the sales trend; the agent reads both,
computes with pandas, draws ``chart.png`` with matplotlib; the answer cites the chart, and the
official SDK downloads it through ``client.containers``."""

from __future__ import annotations

import pytest
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from openai.types.responses.response_output_text import AnnotationContainerFileCitation

from server.simulator import SimulatorServer
from tests.documents import pdf, require_data_python
from tests.server.served import sdk_client
from tests.server.tools.conftest import (
    KEY,
    MODEL,
    ToolServer,
    answer,
    call,
    script,
    tool_results,
)

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)

SALES = "month,sales\n2026-01,120\n2026-02,135\n2026-03,150\n2026-04,171\n"
ANALYSE = (
    "import pandas as pd\n"
    "import matplotlib.pyplot as plt\n"
    "sales = pd.read_csv('data.csv')\n"
    "growth = sales['sales'].pct_change().mean()\n"
    "print(f'mean {sales.sales.mean():.2f} growth {growth:.4f}')\n"
    "sales.plot(x='month', y='sales', marker='o')\n"
    "plt.savefig('chart.png')\n"
)


async def test_upload_analyse_chart_and_download_the_chart(
    tool_server: ToolServer, simulator: SimulatorServer
) -> None:
    require_data_python()
    async with sdk_client(tool_server.base_url, KEY) as client:
        data = await client.files.create(file=("data.csv", SALES.encode()), purpose="user_data")
        brief = await client.files.create(
            file=("brief.pdf", pdf(["Quarterly brief: report the sales trend."])),
            purpose="user_data",
        )
        script(
            simulator,
            call("read_file", path="data.csv"),
            call("read_file", path="brief.pdf"),
            call("code", code=ANALYSE),
            answer("Sales grow about 12% a month; see chart.png."),
        )
        response = await client.responses.create(
            model=MODEL,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is the sales trend?"},
                        {"type": "input_file", "file_id": data.id},
                        {"type": "input_file", "file_id": brief.id},
                    ],
                }
            ],
        )

        csv_seen, pdf_seen, analysis = tool_results(simulator)
        assert "2026-04,171" in csv_seen
        assert "--- page 1 ---" in pdf_seen
        assert "report the sales trend" in pdf_seen
        assert "mean 144.00 growth 0.1254" in analysis

        message = response.output[-1]
        assert isinstance(message, ResponseOutputMessage)
        text = message.content[0]
        assert isinstance(text, ResponseOutputText)
        citations = [
            a
            for a in text.annotations
            if isinstance(a, AnnotationContainerFileCitation) and a.filename == "chart.png"
        ]
        assert len(citations) == 1
        chart = await client.containers.files.content.retrieve(
            citations[0].file_id, container_id=citations[0].container_id
        )
        assert chart.content.startswith(b"\x89PNG\r\n\x1a\n")
