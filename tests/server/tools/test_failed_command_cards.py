"""A command that exits non-zero on Open WebUI's Responses connection, against a real server
process: its card is kept failed in the Response, and a client that sends the turn's output
items back as the next turn's input (status and all, as the Responses API has clients do) is
answered, not refused."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from openai import AsyncOpenAI

from server.simulator import SimulatorServer
from tests.server.tools.conftest import MODEL, ToolServer, answer, call, script, tool_results

pytestmark = pytest.mark.slow  # starts server processes (make fast leaves it out)


async def test_a_failed_command_card_sent_back_as_input_is_read_as_the_call_it_was(
    tool_server: ToolServer, simulator: SimulatorServer, openai: AsyncOpenAI
) -> None:
    script(
        simulator,
        call("shell", command="echo half-done; exit 3"),
        answer("It failed."),
        answer("It printed half-done, then exited with code 3."),
    )
    openwebui = {"x-openwebui-chat-id": f"owui-{uuid.uuid4().hex}"}
    asked: Any = {"role": "user", "content": "try"}

    first = await openai.responses.create(model=MODEL, input=[asked], extra_headers=openwebui)
    earlier: list[Any] = [item.model_dump(exclude_none=True) for item in first.output]
    second = await openai.responses.create(
        model=MODEL,
        input=[asked, *earlier, {"role": "user", "content": "what happened?"}],
        extra_headers=openwebui,
    )

    card = next(item for item in earlier if item["type"] == "function_call")
    assert card["status"] == "failed"  # drawn red
    assert second.status == "completed"
    assert second.output_text == "It printed half-done, then exited with code 3."
    # The model read the failed call and its whole output as the earlier turn's.
    shown = tool_results(simulator)
    assert len(shown) == 1
    assert shown[0].startswith("[exit code 3; ")
    assert "half-done" in shown[0]
