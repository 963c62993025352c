"""Anthropic Messages replies as the simulator sends them: one whole message, or its SSE frames.

A thinking block carries a deterministic :func:`thinking_signature`, which
:mod:`server.simulator.anthropic_messages` checks when a client sends the block back. A scripted
tool call's raw arguments reach the client only in a stream (``input_json_delta``); a whole
message has room for a parsed ``input`` object alone.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from server.simulator.scenario import Reply, ToolCallSpec
from server.simulator.tokens import digest
from server.simulator.wire import split_text, sse

_STOP_REASONS = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def thinking_signature(thinking: str) -> str:
    """The signature the simulator issues for a thinking text: deterministic, so a client that
    replays the block verbatim passes and one that edits or drops it fails."""
    raw = bytes.fromhex(digest("hermes-simulator thinking signature", thinking))
    return base64.b64encode(raw).decode("ascii")


def _tool_use_id(reply: Reply, index: int, seq: int) -> str:
    return reply.tool_calls[index].id or f"toolu_sim{seq}_{index}"


def _parsed_input(call: ToolCallSpec) -> dict[str, Any]:
    try:
        parsed = json.loads(call.arguments_text)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def message_object(
    message_id: str, model: str, reply: Reply, usage: dict[str, Any], seq: int
) -> dict[str, Any]:
    """A complete (non-streaming) Messages API response."""
    content: list[dict[str, Any]] = []
    if reply.reasoning:
        signature = thinking_signature(reply.reasoning)
        content.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature})
    if reply.text:
        content.append({"type": "text", "text": reply.text})
    content += [
        {
            "type": "tool_use",
            "id": _tool_use_id(reply, i, seq),
            "name": call.name,
            "input": _parsed_input(call),
        }
        for i, call in enumerate(reply.tool_calls)
    ]
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP_REASONS[reply.resolved_finish_reason],
        "stop_sequence": None,
        "usage": usage,
    }


def _streamed_blocks(reply: Reply, seq: int) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(content_block_start block, its deltas) for each block, in index order."""
    out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if reply.reasoning:
        deltas = [
            {"type": "thinking_delta", "thinking": p} for p in split_text(reply.reasoning, None)
        ]
        deltas.append({"type": "signature_delta", "signature": thinking_signature(reply.reasoning)})
        out.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if reply.text:
        pieces = split_text(reply.text, reply.chunk_count)
        out.append(
            ({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])
        )
    for i, call in enumerate(reply.tool_calls):
        start = {
            "type": "tool_use",
            "id": _tool_use_id(reply, i, seq),
            "name": call.name,
            "input": {},
        }
        pieces = split_text(call.arguments_text, None)
        out.append((start, [{"type": "input_json_delta", "partial_json": p} for p in pieces]))
    return out


def stream_frames(
    message_id: str, model: str, reply: Reply, usage: dict[str, Any], seq: int
) -> list[str]:
    """The SSE frames of a streamed reply; every frame is named after its ``type``."""
    start: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, (block, deltas) in enumerate(_streamed_blocks(reply, seq)):
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": index})
    stop_reason = _STOP_REASONS[reply.resolved_finish_reason]
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return [sse(event, event=event["type"]) for event in events]


def error_frame(kind: str, message: str) -> str:
    return sse({"type": "error", "error": {"type": kind, "message": message}}, event="error")
