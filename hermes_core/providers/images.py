"""Which images a model call carries, decided once for every adapter.

Images in the internal format are ``image_url`` content parts holding a ``data:`` URL (or an
http(s) URL a client sent). Two rules keep them affordable and honest:

- **A tool's image is sent once**: in the call right after the tool returned it (the tool
  results after the last assistant message). Later calls get a one-line placeholder instead,
  because a 5 MB base64 image resent with every later prompt costs far more than it helps; the
  model can look again (``view_image``) when it needs to. The transcript keeps the image.
- **A model that cannot see images gets none** (``ProviderConfig.vision`` false): every image,
  a user's included, becomes a placeholder telling the model how it may still learn what the
  image shows (``vision_analyze``, when that tool is offered).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hermes_core.messages import Message
from hermes_core.providers.base import ModelRequest

VISION_TOOL = "vision_analyze"
"""The tool a text-only model is pointed to (``hermes_core/tools/images.py``)."""


def offers_vision_tool(request: ModelRequest) -> bool:
    return any(tool.name == VISION_TOOL for tool in request.tools)


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def image_url_of(part: dict[str, Any]) -> str:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    return url if isinstance(url, str) else ""


def describe_image(url: str) -> str:
    """``image/png, 70 bytes`` for a data: URL (sized without decoding), the address for a
    URL; what placeholders and progress lines say of an image."""
    if not url.startswith("data:"):
        return url[:200] or "no address"
    header, _, data = url.partition(",")
    mime = header.removeprefix("data:").split(";")[0] or "image"
    size = len(data) * 3 // 4 - data[-2:].count("=")
    return f"{mime}, {size} bytes"


def images_for_model(
    messages: Sequence[Message], *, vision: bool, vision_tool: bool = False
) -> list[Message]:
    """``messages`` with the images this call may not carry replaced by placeholders (a new
    list; messages that change are copies, the input is never mutated)."""
    last_assistant = max(
        (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1
    )
    out: list[Message] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list) or not any(is_image_part(p) for p in content):
            out.append(message)
            continue
        if not vision:
            note = _blind_note(message["role"] == "tool" and vision_tool)
        elif message["role"] == "tool" and index < last_assistant:
            note = "shown to you when the tool returned it; not repeated"
        else:
            out.append(message)
            continue
        changed = copy.copy(message)
        changed["content"] = [
            {"type": "text", "text": f"[image: {describe_image(image_url_of(p))}; {note}]"}
            if is_image_part(p)
            else p
            for p in content
        ]
        out.append(changed)
    return out


def _blind_note(tool_can_look: bool) -> str:
    if tool_can_look:
        return (
            f"you cannot see images: call {VISION_TOOL} with a question (and no path) to "
            "learn what it shows"
        )
    return "you cannot see images"


def sniff_image_type(data: bytes) -> str | None:
    """The image type ``data`` starts like (magic bytes), or None when it is none we send."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None
