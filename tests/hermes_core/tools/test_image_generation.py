"""``generate_image`` against the simulator's images endpoint: the image lands in the
workspace and in the result, partial images are reported as events, a request's options win
over the model's, and a failed generation is a result the model reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from hermes_core.events import ImagePartial
from hermes_core.providers.config import ProviderConfig
from hermes_core.providers.images_api import ImageChain, ImagesProvider
from hermes_core.tools.image_generation import (
    ImageOptions,
    generate_image_tool,
    image_options,
)
from hermes_core.tools.registry import Tool, ToolContext
from hermes_core.tools.results import ToolOutput
from server.simulator import Fault, Scenario, SimulatorServer, Step

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
async def tool(simulator: SimulatorServer) -> AsyncIterator[Tool]:
    config = ProviderConfig(
        name="images",
        model="gpt-image-1",
        api_mode="chat_completions",
        base_url=simulator.base_url + "/v1",
        api_key=SecretStr("k"),
        timeout=10.0,
    )
    provider = ImagesProvider(config)
    yield generate_image_tool(ImageChain([provider]))
    await provider.aclose()


def context(workspace: Path, emitted: list[Any]) -> ToolContext:
    def emit(event_class: Any, /, *args: Any, **fields: Any) -> Any:
        event = event_class("r", len(emitted), *args, **fields)
        emitted.append(event)
        return event

    return ToolContext(
        run_id="r",
        task_id="t",
        call_id="call_1",
        is_interrupted=lambda: False,
        workspace=workspace,
        emit=emit,
    )


async def test_the_image_is_written_to_the_workspace_and_shown_to_the_model(
    tool: Tool, tmp_path: Path
) -> None:
    result = await tool.handler({"prompt": "A red fox in snow"}, context(tmp_path, []))
    assert isinstance(result, ToolOutput)
    assert "images/a-red-fox-in-snow.png" in result.text
    written = (tmp_path / "images" / "a-red-fox-in-snow.png").read_bytes()
    assert written.startswith(PNG_SIGNATURE)
    [image] = result.images
    assert image.data == written


async def test_a_second_image_of_the_same_prompt_gets_its_own_file(
    tool: Tool, tmp_path: Path
) -> None:
    await tool.handler({"prompt": "a fox"}, context(tmp_path, []))
    second = await tool.handler({"prompt": "a fox"}, context(tmp_path, []))
    assert isinstance(second, ToolOutput)
    assert "images/a-fox-2.png" in second.text
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == ["a-fox-2.png", "a-fox.png"]


async def test_partial_images_are_reported_as_events_under_the_requests_options(
    tool: Tool, tmp_path: Path, simulator: SimulatorServer
) -> None:
    emitted: list[Any] = []
    options = ImageOptions(size="1536x1024", quality="high", partial_images=2)
    with image_options(options):
        await tool.handler({"prompt": "a fox", "size": "1024x1024"}, context(tmp_path, emitted))
    assert [(type(e), e.index, e.call_id) for e in emitted] == [
        (ImagePartial, 0, "call_1"),
        (ImagePartial, 1, "call_1"),
    ]
    [sent] = simulator.state.requests()
    assert sent.body["size"] == "1536x1024"
    assert sent.body["quality"] == "high"


async def test_a_failed_generation_is_an_error_result(
    tool: Tool, tmp_path: Path, simulator: SimulatorServer
) -> None:
    simulator.state.script("gpt-image-1", Scenario(steps=[Step(fault=Fault(status=500))]))
    result = await tool.handler({"prompt": "a fox"}, context(tmp_path, []))
    assert isinstance(result, str)
    assert result.startswith("Error: the image could not be generated")
    assert not (tmp_path / "images").exists()


async def test_an_empty_prompt_is_refused_before_any_call(
    tool: Tool, tmp_path: Path, simulator: SimulatorServer
) -> None:
    result = await tool.handler({"prompt": " "}, context(tmp_path, []))
    assert isinstance(result, str)
    assert "prompt" in result
    assert simulator.state.requests() == []
