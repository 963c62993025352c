"""OpenAI Responses replies as the simulator sends them: the response object and its events.

The object carries all 31 keys of Open Responses' ``ResponseResource``; the stream follows the
canonical event order, and sequence numbers are stamped in :func:`stream_frames` alone (an
injected :func:`error_frame` continues their numbering).
"""

from __future__ import annotations

import time
from typing import Any

from server.simulator.scenario import Reply
from server.simulator.wire import split_text, sse

_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


# --- response object -----------------------------------------------------------------------------


def output_items(reply: Reply, seq: int) -> list[dict[str, Any]]:
    """The final output items: reasoning, then the message, then one item per tool call."""
    items: list[dict[str, Any]] = []
    if reply.reasoning:
        items.append(
            {
                "id": f"rs_sim{seq}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": reply.reasoning}],
            }
        )
    if reply.text:
        items.append(
            {
                "id": f"msg_sim{seq}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": reply.text, "annotations": [], "logprobs": []}
                ],
            }
        )
    for index, call in enumerate(reply.tool_calls):
        items.append(
            {
                "id": f"fc_sim{seq}_{index}",
                "type": "function_call",
                "call_id": call.id or f"call_sim{seq}_{index}",
                "name": call.name,
                "arguments": call.arguments_text,
                "status": "completed",
            }
        )
    if items and reply.resolved_finish_reason in _INCOMPLETE_REASONS and "status" in items[-1]:
        # Open Responses: the item generation stopped in is the last one, and is incomplete.
        items[-1]["status"] = "incomplete"
    return items


def response_object(
    body: dict[str, Any],
    response_id: str,
    created_at: int,
    *,
    reply: Reply | None,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """All 31 keys of Open Responses' ``ResponseResource``; ``reply=None`` gives the in-progress
    snapshot that ``response.created`` and ``response.in_progress`` carry."""
    status, incomplete, completed_at = "in_progress", None, None
    if reply is not None:
        reason = _INCOMPLETE_REASONS.get(reply.resolved_finish_reason)
        if reason is None:
            status, completed_at = "completed", int(time.time())
        else:
            status, incomplete = "incomplete", {"reason": reason}
    reasoning = body.get("reasoning")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "completed_at": completed_at,
        "status": status,
        "incomplete_details": incomplete,
        "model": str(body.get("model", "")),
        "previous_response_id": body.get("previous_response_id"),
        "instructions": body.get("instructions"),
        "output": output,
        "error": None,
        "tools": [_echo_tool(tool) for tool in body.get("tools") or []],
        "tool_choice": body.get("tool_choice") or "auto",
        "truncation": body.get("truncation") or "disabled",
        "parallel_tool_calls": _given(body, "parallel_tool_calls", True),
        "text": body.get("text") or {"format": {"type": "text"}},
        "top_p": _given(body, "top_p", 1.0),
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "temperature": _given(body, "temperature", 1.0),
        "top_logprobs": body.get("top_logprobs") or 0,
        "reasoning": (
            {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")}
            if isinstance(reasoning, dict)
            else None
        ),
        "usage": usage,
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "store": _given(body, "store", True),
        "background": False,
        "service_tier": "default",
        "metadata": body.get("metadata") or {},
        "safety_identifier": body.get("safety_identifier"),
        "prompt_cache_key": body.get("prompt_cache_key"),
    }


def _given(body: dict[str, Any], key: str, default: Any) -> Any:
    # An explicit null means "the default" in a request, but the echo must carry a value.
    value = body.get(key)
    return default if value is None else value


def _echo_tool(tool: dict[str, Any]) -> dict[str, Any]:
    # Validators reject an echoed function tool without ``strict``; OpenAI defaults it to true.
    if tool.get("type") != "function":
        return tool
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }


# --- stream --------------------------------------------------------------------------------------


def stream_frames(body: dict[str, Any], final: dict[str, Any], reply: Reply) -> list[str]:
    """The canonical event order; sequence numbers are stamped here and nowhere else."""
    snapshot = response_object(
        body, final["id"], final["created_at"], reply=None, output=[], usage=None
    )
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": snapshot},
        {"type": "response.in_progress", "response": snapshot},
    ]
    for index, item in enumerate(final["output"]):
        events += _item_events(index, item, reply.chunk_count)
    terminal = "response.completed" if final["status"] == "completed" else "response.incomplete"
    events.append({"type": terminal, "response": final})
    return [
        sse({"type": event["type"], "sequence_number": n, **event}, event=event["type"])
        for n, event in enumerate(events)
    ]


def _item_events(index: int, item: dict[str, Any], chunk_count: int | None) -> list[dict[str, Any]]:
    """``output_item.added``, the item's own part and delta events, ``output_item.done``."""
    if item["type"] == "reasoning":
        skeleton, body = {**item, "summary": []}, _reasoning_events(index, item)
    elif item["type"] == "message":
        skeleton = {**item, "status": "in_progress", "content": []}
        body = _message_events(index, item, chunk_count)
    else:
        # call_id is already on the added item: the SDK's stream helper checks that the done
        # item keeps the added item's identity.
        skeleton = {**item, "status": "in_progress", "arguments": ""}
        body = _function_call_events(index, item)
    return [
        {"type": "response.output_item.added", "output_index": index, "item": skeleton},
        *body,
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _reasoning_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    summary = item["summary"][0]
    where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
    return [
        {
            "type": "response.reasoning_summary_part.added",
            **where,
            "part": {"type": "summary_text", "text": ""},
        },
        *(
            {"type": "response.reasoning_summary_text.delta", **where, "delta": piece}
            for piece in split_text(summary["text"], None)
        ),
        {"type": "response.reasoning_summary_text.done", **where, "text": summary["text"]},
        {"type": "response.reasoning_summary_part.done", **where, "part": summary},
    ]


def _message_events(
    index: int, item: dict[str, Any], chunk_count: int | None
) -> list[dict[str, Any]]:
    part = item["content"][0]
    where = {"item_id": item["id"], "output_index": index, "content_index": 0}
    return [
        {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
        *(
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in split_text(part["text"], chunk_count)
        ),
        {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []},
        {"type": "response.content_part.done", **where, "part": part},
    ]


def _function_call_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    where = {"item_id": item["id"], "output_index": index}
    return [
        *(
            {"type": "response.function_call_arguments.delta", **where, "delta": piece}
            for piece in split_text(item["arguments"], None)
        ),
        {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]},
    ]


def error_frame(kind: str, message: str, *, sequence_number: int) -> str:
    payload = {
        "type": "error",
        "code": kind,
        "message": message,
        "param": None,
        "sequence_number": sequence_number,
    }
    return sse(payload, event="error")
