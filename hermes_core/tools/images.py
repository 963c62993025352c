"""Tools that let the model look at images: ``view_image`` and ``vision_analyze``.

``view_image`` (toolset ``files``) reads a PNG, JPEG, GIF or WEBP from the workspace and hands
it to the model as an image, so an agent can check the chart it just drew. ``vision_analyze``
is for a main model that cannot see images (``ProviderConfig.vision`` false): it asks the
profile's vision chain (``vision_providers``) a question about an image — a workspace file, or
the last image a tool of this run returned — and returns the answer as text.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hermes_core.errors import ProviderError
from hermes_core.messages import Message, text_of
from hermes_core.providers.base import ModelRequest, ModelResponse, Provider
from hermes_core.providers.images import VISION_TOOL, sniff_image_type
from hermes_core.tools.registry import Tool, ToolContext
from hermes_core.tools.results import MAX_IMAGE_BYTES, ImagePart, ToolOutput
from hermes_core.tools.workspace import OutsideWorkspace, Workspace

VISION_TIMEOUT_S = 180.0
VISION_MAX_TOKENS = 1024
"""The vision model's answer is a tool result: a page of text is plenty."""
_VISION_SYSTEM = (
    "You look at an image for another assistant that cannot see it, and answer its question "
    "about the image. Be precise and factual: read out text and numbers exactly, and say "
    "plainly what you cannot make out."
)
_MB = 1024 * 1024


class ImageRefused(ValueError):
    """A file that cannot be sent as an image; the message tells the model why."""


def read_image(workspace: Workspace, relative: str) -> ImagePart:
    """The image at ``relative`` in ``workspace``: opened as the file tools open files (no
    symlink out, regular files only), at most ``MAX_IMAGE_BYTES``, its type read from its
    first bytes rather than its name."""
    descriptor = workspace.open(relative, os.O_RDONLY)
    with os.fdopen(descriptor, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size > MAX_IMAGE_BYTES:
            raise ImageRefused(_too_large(relative, size))
        data = file.read(MAX_IMAGE_BYTES + 1)
    if len(data) > MAX_IMAGE_BYTES:  # it grew while we read it
        raise ImageRefused(_too_large(relative, len(data)))
    mime = sniff_image_type(data)
    if mime is None:
        raise ImageRefused(f"{relative} is not a PNG, JPEG, GIF or WEBP image (by its content).")
    return ImagePart(mime, data)


def _too_large(relative: str, size: int) -> str:
    return (
        f"{relative} is {size / _MB:.1f} MB; an image may be at most {MAX_IMAGE_BYTES // _MB} MB "
        "(make a smaller one, e.g. a lower resolution)."
    )


def _image_at(arguments: dict[str, Any], ctx: ToolContext) -> ImagePart | str:
    """The image a call names, or an ``Error: …`` the model can act on."""
    relative = arguments.get("path")
    if not isinstance(relative, str) or not relative:
        return "Error: give the image's path in the workspace, e.g. 'charts/sales.png'."
    if ctx.workspace is None:
        return "Error: this conversation has no workspace: there are no files to look at."
    try:
        return read_image(Workspace(ctx.workspace), relative)
    except (OutsideWorkspace, ImageRefused) as exc:
        return f"Error: {exc}"
    except FileNotFoundError:
        return "Error: no such file in the workspace (list_files shows what there is)."
    except IsADirectoryError:
        return "Error: that is a directory; give an image file's path."
    except OSError as exc:
        return f"Error: {exc.strerror or type(exc).__name__}."


def view_image(arguments: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
    image = _image_at(arguments, ctx)
    if isinstance(image, str):
        return image
    return ToolOutput(f"{arguments['path']} ({image.describe()})", [image])


def view_image_tool() -> Tool:
    return Tool(
        name="view_image",
        toolset="files",
        description=(
            "Look at an image file of the workspace (PNG, JPEG, GIF or WEBP, at most "
            f"{MAX_IMAGE_BYTES // _MB} MB): it is shown to you once, in your next step. Use it "
            "to check a chart or picture you made or were given."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace."}
            },
            "required": ["path"],
        },
        handler=view_image,
        timeout=30.0,
    )


def vision_analyze_tool(vision: Provider) -> Tool:
    """``vision_analyze``, answered by ``vision`` (the profile's vision chain)."""

    async def analyze(arguments: dict[str, Any], ctx: ToolContext) -> str:
        question = arguments.get("question")
        if not isinstance(question, str) or not question.strip():
            return "Error: ask a question about the image, e.g. 'What does the chart show?'."
        if arguments.get("path"):
            found = await asyncio.to_thread(_image_at, arguments, ctx)
            if isinstance(found, str):
                return found
            image = found
        elif ctx.images:
            image = ctx.images[-1]
        else:
            return (
                "Error: no tool of this run has returned an image; give the path of an image "
                "file in the workspace."
            )
        return await ask_vision(vision, question, image)

    return Tool(
        name=VISION_TOOL,
        toolset="vision",
        description=(
            "You cannot see images: this asks a vision model a question about one and returns "
            "its answer. The image is a file of the workspace (path), or, without a path, the "
            "last image a tool returned."
        ),
        parameters={
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "What you want to know."},
                "path": {
                    "type": "string",
                    "description": "An image file in the workspace; omit for the last image "
                    "a tool returned.",
                },
            },
            "required": ["question"],
        },
        handler=analyze,
        cancellable=True,
        timeout=VISION_TIMEOUT_S,
    )


async def ask_vision(vision: Provider, question: str, image: ImagePart) -> str:
    """``vision``'s answer to ``question`` about ``image``, as a tool result."""
    messages: list[Message] = [
        {"role": "system", "content": _VISION_SYSTEM},
        {
            "role": "user",
            "content": [{"type": "text", "text": question}, image.content_part()],
        },
    ]
    request = ModelRequest(messages=messages, max_tokens=VISION_MAX_TOKENS, stream=False)
    answer = ""
    try:
        async for event in vision.stream(request):
            if isinstance(event, ModelResponse):
                answer = text_of(event.message.get("content"))
    except ProviderError as error:
        return f"Error: the vision model could not answer ({error.kind.value}): {error}"
    return answer.strip() or "Error: the vision model gave no answer."
