"""The simulator's OpenAI images endpoint (``POST /v1/images/generations``).

It draws a small valid PNG (a solid square whose colour follows the prompt) with zlib and
struct alone, so the server needs no imaging library to be tested. Asked to ``stream`` with
``partial_images``, it sends that many ``image_generation.partial_image`` events (each its own
smaller PNG) and then ``image_generation.completed``, as OpenAI does. A scenario's faults apply
as on the model endpoints: an HTTP error, a first-byte delay, a dropped stream or an in-stream
error.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import time
import zlib
from typing import Any

from starlette.responses import Response

from server.simulator.state import CallPlan, SimulatorState
from server.simulator.wire import (
    error_body,
    error_response,
    json_reply,
    preflight,
    sse,
    stream_response,
)

IMAGE_SIDE = 16
"""Pixels per side of the final image (whatever size was asked: it stays small)."""
MAX_PARTIAL_IMAGES = 3


async def respond(state: SimulatorState, plan: CallPlan, body: dict[str, Any]) -> Response:
    refusal = await preflight(state, plan)
    if refusal is not None:
        return refusal
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        return error_response(state, plan, 400, "Missing required parameter: 'prompt'.")
    if not isinstance(body.get("model"), str):
        return error_response(state, plan, 400, "Missing required parameter: 'model'.")
    partials = body.get("partial_images") or 0
    if not isinstance(partials, int) or not 0 <= partials <= MAX_PARTIAL_IMAGES:
        return error_response(
            state, plan, 400, f"'partial_images' must be between 0 and {MAX_PARTIAL_IMAGES}."
        )
    final = png(IMAGE_SIDE, colour_of(prompt))
    settings = {
        "background": body.get("background") or "opaque",
        "output_format": body.get("output_format") or "png",
        "quality": body.get("quality") or "medium",
        "size": body.get("size") or "1024x1024",
    }
    created = int(time.time())
    if body.get("stream"):
        frames = [
            sse(
                {
                    "type": "image_generation.partial_image",
                    "b64_json": _b64(png(4 * (n + 1), colour_of(f"{prompt}/{n}"))),
                    "partial_image_index": n,
                    "created_at": created,
                    **settings,
                },
                event="image_generation.partial_image",
            )
            for n in range(partials)
        ]
        completed = {
            "type": "image_generation.completed",
            "b64_json": _b64(final),
            "created_at": created,
            "usage": _usage(prompt),
            **settings,
        }
        frames.append(sse(completed, event="image_generation.completed"))
        return stream_response(state, plan, frames, error_frame=_error_frame)
    payload = {
        "created": created,
        "data": [{"b64_json": _b64(final)}],
        "usage": _usage(prompt),
        **settings,
    }
    return await json_reply(state, plan, payload, frame_count=lambda: partials + 1)


def png(side: int, colour: tuple[int, int, int]) -> bytes:
    """A ``side`` × ``side`` PNG of one RGB colour: signature, IHDR, one IDAT, IEND."""
    row = b"\x00" + bytes(colour) * side  # filter type 0, then the pixels
    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(row * side))
        + _chunk(b"IEND", b"")
    )


def colour_of(text: str) -> tuple[int, int, int]:
    digest = hashlib.sha256(text.encode()).digest()
    return digest[0], digest[1], digest[2]


def _chunk(kind: bytes, data: bytes) -> bytes:
    checksum = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", checksum)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _usage(prompt: str) -> dict[str, Any]:
    words = len(prompt.split())
    return {
        "input_tokens": words,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": words},
        "output_tokens": 272,
        "total_tokens": words + 272,
    }


def _error_frame(kind: str, message: str) -> str:
    body = error_body("images", 500, message)
    body["error"]["type"] = kind
    return sse(body, event="error")
