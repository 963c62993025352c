"""Images from tools: view_image's reading and refusals, the bounds a result's images are held
to, MCP image content, and vision_analyze on a scripted vision model."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from hermes_core.agent.emitter import Emitter
from hermes_core.events import AgentEvent, ToolFinished
from hermes_core.providers.scripted import ScriptedProvider
from hermes_core.tools import images as image_tools
from hermes_core.tools.executor import PlannedCall, ToolExecutor
from hermes_core.tools.images import view_image, vision_analyze_tool
from hermes_core.tools.mcp.toolset import result_output
from hermes_core.tools.registry import Tool, ToolContext, ToolRegistry
from hermes_core.tools.results import MAX_IMAGES_PER_RESULT, ImagePart, ToolOutput
from tests.pictures import PNG

JPEG_START = b"\xff\xd8\xff\xe0" + b"\0" * 16


def _ctx(workspace: Path | None, images: tuple[ImagePart, ...] = ()) -> ToolContext:
    return ToolContext(
        run_id="r",
        task_id="t",
        call_id="c",
        is_interrupted=lambda: False,
        workspace=workspace,
        images=images,
    )


def test_view_image_returns_the_file_as_an_image(tmp_path: Path) -> None:
    (tmp_path / "plot.png").write_bytes(PNG)
    result = view_image({"path": "plot.png"}, _ctx(tmp_path))
    assert result == ToolOutput("plot.png (image/png, 70 bytes)", [ImagePart("image/png", PNG)])


def test_view_image_reads_the_type_from_the_bytes_not_the_name(tmp_path: Path) -> None:
    (tmp_path / "photo.png").write_bytes(JPEG_START)
    (tmp_path / "notes.png").write_text("not a picture")
    result = view_image({"path": "photo.png"}, _ctx(tmp_path))
    assert isinstance(result, ToolOutput)
    assert result.images[0].mime == "image/jpeg"
    assert view_image({"path": "notes.png"}, _ctx(tmp_path)) == (
        "Error: notes.png is not a PNG, JPEG, GIF or WEBP image (by its content)."
    )


def test_view_image_refuses_a_file_over_the_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image_tools, "MAX_IMAGE_BYTES", 64)
    (tmp_path / "big.png").write_bytes(PNG)
    result = view_image({"path": "big.png"}, _ctx(tmp_path))
    assert isinstance(result, str)
    assert result.startswith("Error: big.png is 0.0 MB; an image may be at most")


def test_view_image_stays_inside_the_workspace(tmp_path: Path) -> None:
    outside = tmp_path / "outside.png"
    outside.write_bytes(PNG)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "link.png").symlink_to(outside)
    os.mkfifo(workspace / "pipe.png")
    assert str(view_image({"path": "link.png"}, _ctx(workspace))).startswith("Error: 'link.png'")
    assert str(view_image({"path": "../outside.png"}, _ctx(workspace))).startswith("Error:")
    assert "not a regular file" in str(view_image({"path": "pipe.png"}, _ctx(workspace)))
    assert "no such file" in str(view_image({"path": "gone.png"}, _ctx(workspace)))
    assert "no workspace" in str(view_image({"path": "a.png"}, _ctx(None)))


async def _run(handler: Any, *earlier: ImagePart) -> tuple[Any, list[AgentEvent]]:
    events: list[AgentEvent] = []
    tool = Tool(name="pics", description="", parameters={}, handler=handler)
    executor = ToolExecutor(
        registry=ToolRegistry([tool]),
        emit=Emitter("r", events.append).emit,
        run_id="r",
        task_id="t",
        interrupted=asyncio.Event(),
    )
    executor._images += earlier
    call = PlannedCall(call_id="c1", name="pics", arguments={}, tool=tool)
    [result] = await executor.run_batch([call])
    return result, events


async def test_images_beyond_the_bounds_are_dropped_with_a_note() -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        pictures = [ImagePart("image/png", PNG)] * (MAX_IMAGES_PER_RESULT + 1)
        return ToolOutput("pictures", [ImagePart("image/png", b"<svg/>"), *pictures])

    result, events = await _run(handler)
    assert len(result.images) == MAX_IMAGES_PER_RESULT
    assert result.content.splitlines() == [
        "pictures",
        "[image 1 (image/png) dropped: not a PNG, JPEG, GIF or WEBP]",
        f"[image {MAX_IMAGES_PER_RESULT + 2} dropped: a result carries at most "
        f"{MAX_IMAGES_PER_RESULT}]",
    ]
    assert result.message_content[0] == {"type": "text", "text": result.content}
    [finished] = [e for e in events if isinstance(e, ToolFinished)]
    assert finished.result_preview.endswith("[image: image/png, 70 bytes]")


async def test_a_mislabelled_image_is_sent_under_its_real_type() -> None:
    def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("", [ImagePart("image/gif", PNG)])

    result, _ = await _run(handler)
    assert result.images == (ImagePart("image/png", PNG),)
    assert result.message_content == [ImagePart("image/png", PNG).content_part()]


async def test_a_tool_sees_the_images_earlier_tools_of_its_run_returned() -> None:
    seen: list[tuple[ImagePart, ...]] = []

    def handler(arguments: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(ctx.images)
        return "ok"

    await _run(handler, ImagePart("image/png", PNG))
    assert seen == [(ImagePart("image/png", PNG),)]


def test_mcp_image_content_becomes_an_image_the_model_sees() -> None:
    data = base64.b64encode(PNG).decode()
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(type="text", text="a chart"),
            mcp_types.ImageContent(type="image", data=data, mime_type="image/png"),
        ]
    )
    assert result_output(result) == ToolOutput(
        "a chart\n[image: image/png, 70 bytes]", [ImagePart("image/png", PNG)]
    )
    failed = result.model_copy(update={"is_error": True})
    assert result_output(failed) == "Error: a chart\n[image: image/png, 70 bytes]"


async def test_vision_analyze_asks_the_vision_model_about_a_workspace_image(
    tmp_path: Path,
) -> None:
    (tmp_path / "plot.png").write_bytes(PNG)
    eyes = ScriptedProvider("One black pixel.")
    tool = vision_analyze_tool(eyes)
    answer = await tool.handler({"question": "What is it?", "path": "plot.png"}, _ctx(tmp_path))
    assert answer == "One black pixel."
    [request] = eyes.requests
    content = request.messages[-1]["content"]
    assert isinstance(content, list)
    assert content[0] == {"type": "text", "text": "What is it?"}
    assert content[1] == ImagePart("image/png", PNG).content_part()


async def test_vision_analyze_without_a_path_looks_at_the_last_tool_image(tmp_path: Path) -> None:
    eyes = ScriptedProvider("A JPEG.")
    tool = vision_analyze_tool(eyes)
    latest = ImagePart("image/jpeg", JPEG_START)
    context = _ctx(tmp_path, (ImagePart("image/png", PNG), latest))
    assert await tool.handler({"question": "Which?"}, context) == "A JPEG."
    content = eyes.requests[0].messages[-1]["content"]
    assert isinstance(content, list)
    assert content[1] == latest.content_part()
    nothing = await tool.handler({"question": "Which?"}, _ctx(tmp_path))
    assert nothing.startswith("Error: no tool of this run has returned an image")


async def test_a_failing_vision_model_is_an_error_result() -> None:
    tool = vision_analyze_tool(ScriptedProvider())  # no reply scripted: the call fails
    answer = await tool.handler({"question": "?"}, _ctx(None, (ImagePart("image/png", PNG),)))
    assert answer.startswith("Error: the vision model could not answer")
