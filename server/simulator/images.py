"""Where each protocol accepts images, checked as the real APIs check them.

Images in tool results are where adapters differ most: Chat Completions takes image parts in
user messages only (a tool message is text), Responses takes ``input_image`` items in a
``function_call_output``'s ``output`` list, Anthropic takes ``image`` blocks in a
``tool_result``'s content. Each check returns the upstream's 400 message, or None.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


def chat_problem(messages: list[Any]) -> str | None:
    for n, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        role = message.get("role")
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "image_url":
                if role != "user":
                    return (
                        f"Invalid 'messages[{n}]'. Image URLs are only allowed for messages "
                        f"with role 'user', but this message with role '{role}' contains an "
                        "image URL."
                    )
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, dict) else None
                problem = _url_problem(url)
                if problem:
                    return f"Invalid 'messages[{n}]': {problem}"
            elif kind != "text" and role in ("tool", "system", "assistant"):
                return f"Invalid 'messages[{n}]': content parts of type {kind!r} are not allowed."
    return None


def responses_output_problem(n: int, output: Any) -> str | None:
    """A ``function_call_output``'s ``output``: a string, or input_text / input_image /
    input_file items."""
    if isinstance(output, str):
        return None
    if not isinstance(output, list):
        return f"Invalid type for 'input[{n}].output': expected a string or an array."
    for m, item in enumerate(output):
        kind = item.get("type") if isinstance(item, dict) else None
        where = f"'input[{n}].output[{m}]'"
        if kind == "input_text":
            if not isinstance(item.get("text"), str):
                return f"Missing required parameter: {where[:-1]}.text'."
        elif kind == "input_image":
            if item.get("file_id"):
                continue
            problem = _url_problem(item.get("image_url"))
            if problem:
                return f"Invalid {where}: {problem}"
        elif kind != "input_file":
            return (
                f"Invalid value: {kind!r} for {where[:-1]}.type'. Supported values are: "
                "'input_text', 'input_image', and 'input_file'."
            )
    return None


def anthropic_problem(messages: list[Any]) -> str | None:
    """Image blocks (in a turn, or in a tool_result's content) with a usable source."""
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            where = f"messages.{i}.content.{j}"
            if block.get("type") == "image":
                problem = _source_problem(block.get("source"))
                if problem:
                    return f"{where}.image.source: {problem}"
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                for k, inner in enumerate(block["content"]):
                    kind = inner.get("type") if isinstance(inner, dict) else None
                    if kind not in ("text", "image", "search_result", "document"):
                        return f"{where}.tool_result.content.{k}: Input tag {kind!r} is invalid"
                    if kind == "image":
                        problem = _source_problem(inner.get("source"))
                        if problem:
                            return f"{where}.tool_result.content.{k}.image.source: {problem}"
    return None


def _url_problem(url: Any) -> str | None:
    if not isinstance(url, str) or not url:
        return "an image needs a URL."
    if url.startswith(("http://", "https://")):
        return None
    if not url.startswith("data:"):
        return "the image URL must be an http(s) or a data: URL."
    header, _, data = url.partition(",")
    mime = header.removeprefix("data:").split(";")[0]
    if mime not in IMAGE_TYPES or ";base64" not in header:
        return f"unsupported image data URL of type {mime!r}."
    return _base64_problem(data)


def _source_problem(source: Any) -> str | None:
    if not isinstance(source, dict):
        return "Field required"
    if source.get("type") == "url":
        return None if isinstance(source.get("url"), str) else "url: Field required"
    if source.get("type") != "base64":
        return f"Input tag {source.get('type')!r} is invalid"
    if source.get("media_type") not in IMAGE_TYPES:
        return f"media_type: Input should be {', '.join(repr(t) for t in IMAGE_TYPES)}"
    return _base64_problem(source.get("data"))


def _base64_problem(data: Any) -> str | None:
    if not isinstance(data, str) or not data:
        return "the image data is empty."
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "the image data is not valid base64."
    return None
