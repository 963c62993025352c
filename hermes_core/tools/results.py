"""Tool results that carry images: what a handler may return besides text, and its bounds.

A handler returns a :class:`ToolOutput` to hand the model images (an MCP tool's image content,
a chart ``view_image`` read). The result message then holds OpenAI-style content parts: the
text, then one ``image_url`` part with a ``data:`` URL per image; each adapter converts them at
its edge (``hermes_core/providers/images.py`` decides which calls carry them).

Images are bounded here, where they enter: a supported type, at most ``MAX_IMAGE_BYTES`` each
and ``MAX_IMAGES_PER_RESULT`` per result. Beyond that an image is dropped with a note the model
reads; nothing is resized.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hermes_core.providers.images import sniff_image_type

MAX_IMAGE_BYTES = 5 * 1024 * 1024
"""Per image: Anthropic's limit for a base64 image, and well within OpenAI's."""
MAX_IMAGES_PER_RESULT = 4
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The types all three APIs accept."""


@dataclass(frozen=True, slots=True)
class ImagePart:
    mime: str
    data: bytes

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def describe(self) -> str:
        return f"{self.mime}, {len(self.data)} bytes"

    def content_part(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.data_url}}


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool result with images: ``text`` is what the model reads (may be empty)."""

    text: str
    images: Sequence[ImagePart] = field(default_factory=tuple)


def admit_images(images: Sequence[ImagePart]) -> tuple[tuple[ImagePart, ...], list[str]]:
    """The images a result may carry, and a note for each one dropped (why, in the model's
    words). The declared type is checked against the bytes: a wrong label would make the
    upstream refuse the whole request."""
    kept: list[ImagePart] = []
    notes: list[str] = []
    for number, image in enumerate(images, start=1):
        actual = sniff_image_type(image.data)
        if actual is None:
            notes.append(f"[image {number} ({image.mime}) dropped: not a PNG, JPEG, GIF or WEBP]")
        elif len(image.data) > MAX_IMAGE_BYTES:
            notes.append(
                f"[image {number} ({actual}, {len(image.data)} bytes) dropped: over the "
                f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB an image may have]"
            )
        elif len(kept) >= MAX_IMAGES_PER_RESULT:
            notes.append(
                f"[image {number} dropped: a result carries at most {MAX_IMAGES_PER_RESULT}]"
            )
        else:
            kept.append(image if actual == image.mime else ImagePart(actual, image.data))
    return tuple(kept), notes


def message_content(text: str, images: Sequence[ImagePart]) -> str | list[dict[str, Any]]:
    """A tool message's content: the text alone, or the text and the images as parts."""
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return parts + [image.content_part() for image in images]
