"""``generate_image`` (toolset ``images``): an image made by the profile's images API chain
(``image_providers``), written into the conversation's workspace.

The image is a workspace file like a chart the code tool drew, so the answer can link it and
the file announcements cite it; the result hands the model the image too (it can say what it
made), with a short text naming the file. Partial images, when asked for, are reported as they
come (:class:`~hermes_core.events.ImagePartial`), for a view that streams them.

A Responses request naming the hosted ``image_generation`` tool sets its options (size,
quality, partial images, format, background) for the runs it starts (:func:`image_options`):
they override what the model asked for, as OpenAI's tool settings do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from hermes_core.errors import ProviderError
from hermes_core.events import ImagePartial
from hermes_core.providers.images_api import (
    MAX_PARTIAL_IMAGES,
    GeneratedImage,
    ImageChain,
    ImageRequest,
)
from hermes_core.tools.quota import QuotaExceeded, WorkspaceQuota, admit_write
from hermes_core.tools.registry import Tool, ToolContext
from hermes_core.tools.results import MAX_IMAGE_BYTES, ImagePart, ToolOutput
from hermes_core.tools.workspace import Workspace

IMAGE_TOOL = "generate_image"
IMAGES_TOOLSET = "images"
IMAGES_DIR = "images"
"""Where in the workspace generated images are written."""
IMAGE_TIMEOUT_S = 300.0
"""Image models take a minute or more for a large, high-quality image."""
MAX_PROMPT_CHARS = 32_000
SIZES = ("auto", "1024x1024", "1024x1536", "1536x1024", "256x256", "512x512", "1792x1024")
QUALITIES = ("auto", "low", "medium", "high", "standard", "hd")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageOptions:
    """Settings a request gives every image its run makes (None: the model's or the
    upstream's choice)."""

    size: str | None = None
    quality: str | None = None
    output_format: str | None = None
    background: str | None = None
    partial_images: int = 0


_OPTIONS: ContextVar[ImageOptions | None] = ContextVar("hermes_image_options", default=None)


@contextlib.contextmanager
def image_options(options: ImageOptions | None) -> Iterator[None]:
    """Runs started inside make their images with ``options`` (the run's task inherits the
    context it was started in)."""
    token = _OPTIONS.set(options)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def image_request(arguments: dict[str, Any]) -> ImageRequest | str:
    """The request the model's ``arguments`` ask for, under the options in force; or what is
    wrong with them, in the model's words."""
    prompt = arguments.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return "Error: describe the image to generate in 'prompt'."
    if len(prompt) > MAX_PROMPT_CHARS:
        return f"Error: the prompt is too long (at most {MAX_PROMPT_CHARS} characters)."
    size, quality = arguments.get("size"), arguments.get("quality")
    if size is not None and size not in SIZES:
        return f"Error: size must be one of {', '.join(SIZES)}."
    if quality is not None and quality not in QUALITIES:
        return f"Error: quality must be one of {', '.join(QUALITIES)}."
    options = _OPTIONS.get() or ImageOptions()
    return ImageRequest(
        prompt=prompt,
        size=options.size or size,
        quality=options.quality or quality,
        output_format=options.output_format,
        background=options.background,
        partial_images=min(options.partial_images, MAX_PARTIAL_IMAGES),
    )


def generate_image_tool(chain: ImageChain, quota: WorkspaceQuota | None = None) -> Tool:
    """``generate_image``, served by ``chain``; written files are held to ``quota``."""

    async def generate(arguments: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        request = image_request(arguments)
        if isinstance(request, str):
            return request
        if ctx.workspace is None:
            return "Error: this conversation has no workspace to put the image in."
        sent = 0

        def partial(_index: int, data: str) -> None:
            # Numbered here, not by the upstream: after a fallback the next provider's
            # partial images go on from where the first one's stopped.
            nonlocal sent
            ctx.emit(ImagePartial, call_id=ctx.call_id, name=IMAGE_TOOL, index=sent, image_b64=data)
            sent += 1

        try:
            image = await chain.generate(request, partial)
        except ProviderError as error:
            return f"Error: the image could not be generated: {error}"
        workspace = Workspace(ctx.workspace)
        try:
            relative = await asyncio.to_thread(_write, workspace, image, arguments, quota)
        except (QuotaExceeded, OSError) as error:
            return f"Error: the image could not be saved in the workspace: {error}"
        text = f"Generated {relative} ({image.mime}, {len(image.data)} bytes)."
        if image.revised_prompt:
            text += f" The prompt as the image model revised it: {image.revised_prompt}"
        if len(image.data) > MAX_IMAGE_BYTES:
            return text  # too large to show the model; the file is there
        return ToolOutput(text=text, images=(ImagePart(image.mime, image.data),))

    return Tool(
        name=IMAGE_TOOL,
        toolset=IMAGES_TOOLSET,
        description=(
            "Generate an image from a text description, with an image model. The image is "
            "saved in the workspace (its path is in the result): link it in your answer."
        ),
        parameters={
            "type": "object",
            "properties": {
                "prompt": {
                    "type": "string",
                    "description": "What the image shows, in detail: subject, style, colours.",
                },
                "size": {"type": "string", "enum": list(SIZES[:4])},
                "quality": {"type": "string", "enum": ["auto", "low", "medium", "high"]},
            },
            "required": ["prompt"],
        },
        handler=generate,
        cancellable=True,
        timeout=IMAGE_TIMEOUT_S,
        summarize=lambda arguments: f"generate_image {str(arguments.get('prompt', ''))[:80]}",
    )


def _write(
    workspace: Workspace,
    image: GeneratedImage,
    arguments: dict[str, Any],
    quota: WorkspaceQuota | None,
) -> str:
    """Write ``image`` under ``images/``, named after its prompt, never over another file
    (file work: on a worker thread); its path relative to the workspace."""
    root = workspace.ensure()
    admit_write(root, len(image.data), quota=quota)
    folder = workspace.makedirs(IMAGES_DIR)
    stem = _slug(str(arguments.get("prompt", ""))) or "image"
    for number in range(1, 10_000):
        name = f"{stem}.{image.extension}" if number == 1 else f"{stem}-{number}.{image.extension}"
        relative = f"{IMAGES_DIR}/{name}"
        try:
            descriptor = workspace.open(relative, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            continue
        with os.fdopen(descriptor, "wb") as file:
            file.write(image.data)
        return workspace.relative(folder / name)
    raise OSError("too many images of the same name")


def _slug(prompt: str) -> str:
    """The prompt's first words as a file name: ``a-red-fox-in-snow``."""
    words = re.findall(r"[a-z0-9]+", prompt.lower())[:6]
    return "-".join(words)[:60]
